package nvml

import (
	"slices"
	"strings"
	"testing"

	"warmd.io/warmd/pkg/nodelabels"
)

func TestIdentityLabels(t *testing.T) {
	h100 := inventory(8, "NVIDIA H100 80GB HBM3", "9.0", "570.124.06", "12.8")
	for i := range h100.Devices {
		h100.Devices[i].Architecture = "hopper"
	}
	nvl := inventory(4, "NVIDIA GB200", "10.0", "580.82.07", "13.0")
	nvl.Clique = "9277d399-0674-44a9-b64e-d85bb19ce2b0.32766"
	mixed := h100
	mixed.Devices = slices.Clone(h100.Devices)
	mixed.Devices[7].Product, mixed.Devices[7].ComputeCapability, mixed.Devices[7].MemoryMiB = "NVIDIA A100-SXM4-40GB", "8.0", 40960
	mixed.Devices[7].Architecture = "ampere"
	mixed.SKU = SKUKey(mixed)
	weird := inventory(1, "  NVIDIA  Weird/Name (rev 2) with a very long marketing name that goes on and on and on ", "9.0", "570.124.06", "12.8")
	tests := []struct {
		name    string
		inv     Inventory
		opt     LabelOptions
		want    nodelabels.Labels // must be a subset of the result
		absent  []string
		noGFDNS bool
	}{
		{name: "no GPU", inv: Absent("null", NoGPUReason),
			want:   nodelabels.Labels{nodelabels.LabelPresent: "false", nodelabels.LabelSKU: SKUNone},
			absent: []string{nodelabels.LabelCount, nodelabels.LabelProduct, "nvidia.com/gpu.count"}, opt: LabelOptions{GFD: true}},
		{name: "8x H100 own names only", inv: h100, noGFDNS: true,
			want: nodelabels.Labels{nodelabels.LabelPresent: "true", nodelabels.LabelSKU: h100.SKU, nodelabels.LabelProduct: "NVIDIA-H100-80GB-HBM3", nodelabels.LabelCount: "8",
				nodelabels.LabelMemory: "81559", nodelabels.LabelFamily: "hopper", nodelabels.LabelComputeMajor: "9", nodelabels.LabelComputeMinor: "0",
				nodelabels.LabelDriverMajor: "570", nodelabels.LabelDriverMinor: "124", nodelabels.LabelDriverRev: "06", nodelabels.LabelCUDAMajor: "12", nodelabels.LabelCUDAMinor: "8",
				nodelabels.LabelMIG: "false"}},
		{name: "8x H100 with GFD names", inv: h100, opt: LabelOptions{GFD: true},
			want: nodelabels.Labels{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
				"nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper",
				"nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
				"nvidia.com/cuda.driver.major": "570", "nvidia.com/cuda.driver.minor": "124", "nvidia.com/cuda.driver.rev": "06",
				"nvidia.com/cuda.driver-version.full": "570.124.06", "nvidia.com/cuda.runtime-version.full": "12.8",
				"nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "8"}},
		{name: "NVL72 clique", inv: nvl, opt: LabelOptions{GFD: true},
			want: nodelabels.Labels{nodelabels.LabelClique: nvl.Clique, "nvidia.com/gpu.clique": nvl.Clique}},
		{name: "mixed node", inv: mixed,
			want:   nodelabels.Labels{nodelabels.LabelProduct: "mixed", nodelabels.LabelMemory: "40960", nodelabels.LabelSKU: mixed.SKU},
			absent: []string{nodelabels.LabelComputeMajor, nodelabels.LabelComputeMinor, nodelabels.LabelFamily}},
		{name: "odd product name is sanitized", inv: weird, opt: LabelOptions{GFD: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := IdentityLabels(tt.inv, tt.opt)
			if err := l.Validate(); err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if l[k] != v {
					t.Errorf("%s = %q, want %q", k, l[k], v)
				}
			}
			for _, k := range tt.absent {
				if v, ok := l[k]; ok {
					t.Errorf("%s = %q, want absent", k, v)
				}
			}
			for k := range l {
				if tt.noGFDNS && strings.HasPrefix(k, "nvidia.com/") {
					t.Errorf("GFD key %s without the GFD option", k)
				}
				if !strings.HasPrefix(k, "warmd.io/") && !strings.HasPrefix(k, "nvidia.com/") {
					t.Errorf("key %s outside our prefixes", k)
				}
			}
		})
	}
}
