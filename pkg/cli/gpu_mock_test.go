//go:build cgo && linux

package cli

import (
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	gonvmlpkg "warmd.io/warmd/pkg/nvml/gonvml"
	"warmd.io/warmd/pkg/nvml/gonvml/gonvmltest"
)

func TestGPUMockGolden(t *testing.T) {
	cluster := [16]uint8{0x92, 0x77, 0xd3, 0x99, 0x06, 0x74, 0x44, 0xa9, 0xb6, 0x4e, 0xd8, 0x5b, 0xb1, 0x9c, 0xe2, 0xb0}
	tests := []struct {
		name    string
		lib     func(t *testing.T) gonvml.Interface
		formats []string
		args    []string
		code    int
	}{
		{name: "h100x8", formats: []string{"table", "json", "yaml"},
			lib: func(t *testing.T) gonvml.Interface { return gonvmltest.Tidy(dgxh100.New(), 1) }},
		{name: "h100x8-gfd", formats: []string{"table"}, args: []string{"--gfd-labels"},
			lib: func(t *testing.T) gonvml.Interface { return gonvmltest.Tidy(dgxh100.New(), 1) }},
		{name: "mig", formats: []string{"table", "json"},
			lib: func(t *testing.T) gonvml.Interface {
				s := gonvmltest.NewServer(t, "570.124.06", 12080, 1, gpus.Multiple(2, gpus.H100_SXM5_80GB)...)
				gonvmltest.EnableMIG(t, s, 0, gonvml.GPU_INSTANCE_PROFILE_1_SLICE, gonvml.GPU_INSTANCE_PROFILE_3_SLICE)
				return s
			}},
		{name: "mixed", formats: []string{"table"},
			lib: func(t *testing.T) gonvml.Interface {
				return gonvmltest.NewServer(t, "570.124.06", 12080, 1, gpus.A100_SXM4_80GB, gpus.H100_SXM5_80GB)
			}},
		{name: "nvl72", formats: []string{"table", "json"},
			lib: func(t *testing.T) gonvml.Interface {
				s := gonvmltest.NewServer(t, "580.82.07", 13000, 1, gpus.Multiple(4, gonvmltest.GB200)...)
				gonvmltest.AttachFabric(s, cluster, 32766)
				return s
			}},
		{name: "failure", formats: []string{"table", "json"}, code: 1,
			lib: func(t *testing.T) gonvml.Interface {
				s := gonvmltest.NewServer(t, "570.124.06", 12080, 1, gpus.Multiple(2, gpus.H200_SXM5_141GB)...)
				gonvmltest.Device(s, 1).GetCudaComputeCapabilityFunc = func() (int, int, gonvml.Return) {
					return 0, 0, gonvml.ERROR_GPU_IS_LOST
				}
				return s
			}},
	}
	for _, tt := range tests {
		for _, format := range tt.formats {
			t.Run(tt.name+"/"+format, func(t *testing.T) {
				det := gonvmlpkg.NewWithLibrary(tt.lib(t))
				out, code := runGPU(t, det, append([]string{"-o", format}, tt.args...)...)
				if code != tt.code {
					t.Errorf("exit %d, want %d", code, tt.code)
				}
				golden(t, "gpu/"+tt.name+"."+format, []byte(out))
			})
		}
	}
}
