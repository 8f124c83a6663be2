//go:build cgo && linux

package gonvml

import (
	"context"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/nvml/gonvml/gonvmltest"
)

func detect(t *testing.T, lib gonvml.Interface) nvml.Inventory {
	t.Helper()
	inv, err := NewWithLibrary(lib).Detect(context.Background())
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	return inv
}

var nvl72Cluster = [16]uint8{0x92, 0x77, 0xd3, 0x99, 0x06, 0x74, 0x44, 0xa9, 0xb6, 0x4e, 0xd8, 0x5b, 0xb1, 0x9c, 0xe2, 0xb0}

func TestDetectMockSystems(t *testing.T) {
	tests := []struct {
		name     string
		lib      func(t *testing.T) gonvml.Interface
		count    int
		product  string
		cc       string
		mig      bool
		clique   string
		migCount int
		shares   string // the case whose key this one must equal (GPU count is not in the key)
	}{
		{name: "single H100", count: 1, product: "NVIDIA H100 80GB HBM3", cc: "9.0",
			lib: func(t *testing.T) gonvml.Interface {
				return gonvmltest.NewServer(t, "550.54.15", 12040, 1, gpus.H100_SXM5_80GB)
			}},
		{name: "8x H100 (dgxh100)", count: 8, shares: "single H100", product: "NVIDIA H100 80GB HBM3", cc: "9.0",
			lib: func(t *testing.T) gonvml.Interface { return gonvmltest.Tidy(dgxh100.New(), 1) }},
		{name: "8x H200 (dgxh200)", count: 8, product: "NVIDIA H200 141GB HBM3e", cc: "9.0",
			lib: func(t *testing.T) gonvml.Interface { return gonvmltest.Tidy(dgxh200.New(), 1) }},
		{name: "8x B200 (dgxb200)", count: 8, product: "NVIDIA B200 180GB HBM3e", cc: "10.0",
			lib: func(t *testing.T) gonvml.Interface { return gonvmltest.Tidy(dgxb200.New(), 1) }},
		{name: "DGX A100 (dgxa100)", count: 8, product: "Mock NVIDIA A100-SXM4-40GB", cc: "8.0",
			lib: func(t *testing.T) gonvml.Interface { return gonvmltest.Tidy(dgxa100.New(), 1) }},
		{name: "H200 on driver 580 / CUDA 13.0", count: 8, product: "NVIDIA H200 141GB HBM3e", cc: "9.0",
			lib: func(t *testing.T) gonvml.Interface {
				return gonvmltest.NewServer(t, "580.82.07", 13000, 1, gpus.Multiple(8, gpus.H200_SXM5_141GB)...)
			}},
		{name: "H100 with MIG enabled on GPU 0", count: 8, product: "NVIDIA H100 80GB HBM3", cc: "9.0", mig: true, migCount: 2,
			lib: func(t *testing.T) gonvml.Interface {
				s := gonvmltest.Tidy(dgxh100.New(), 1)
				gonvmltest.EnableMIG(t, s, 0, gonvml.GPU_INSTANCE_PROFILE_1_SLICE, gonvml.GPU_INSTANCE_PROFILE_3_SLICE)
				return s
			}},
		{name: "mixed A100 80GB + H100", count: 2, product: "", cc: "",
			lib: func(t *testing.T) gonvml.Interface {
				return gonvmltest.NewServer(t, "550.54.15", 12040, 1, gpus.A100_SXM4_80GB, gpus.H100_SXM5_80GB)
			}},
		{name: "NVL72 GB200 tray with fabric", count: 4, product: "NVIDIA GB200", cc: "10.0",
			clique: "9277d399-0674-44a9-b64e-d85bb19ce2b0.32766",
			lib: func(t *testing.T) gonvml.Interface {
				s := gonvmltest.NewServer(t, "580.82.07", 13000, 1, gpus.Multiple(4, gonvmltest.GB200)...)
				gonvmltest.AttachFabric(s, nvl72Cluster, 32766)
				return s
			}},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := detect(t, tt.lib(t))
			t.Logf("SKU key: %s (%d chars)", inv.SKU, len(inv.SKU))
			if !inv.Present || inv.Backend != Backend || len(inv.Problems) > 0 {
				t.Fatalf("present=%v backend=%q problems=%v", inv.Present, inv.Backend, inv.Problems)
			}
			if inv.DeviceCount != tt.count || len(inv.Devices) != tt.count {
				t.Errorf("count %d/%d, want %d", inv.DeviceCount, len(inv.Devices), tt.count)
			}
			if !nvml.Cacheable(inv.SKU) || len(inv.SKU) > 63 {
				t.Errorf("SKU %q not a cacheable label-length key", inv.SKU)
			}
			if other, dup := seen[inv.SKU]; dup != (tt.shares != "") || other != tt.shares {
				t.Errorf("SKU %q also produced by %q; want shared with %q", inv.SKU, other, tt.shares)
			}
			seen[inv.SKU] = tt.name
			labels := nvml.IdentityLabels(inv, nvml.LabelOptions{GFD: true})
			if err := labels.Validate(); err != nil {
				t.Error(err)
			}
			if got := labels["nvidia.com/gpu.product"]; tt.product != "" && got != strings.ReplaceAll(tt.product, " ", "-") {
				t.Errorf("GFD product %q for %q", got, tt.product)
			}
			if tt.product == "" && labels[nodelabels.LabelProduct] != "mixed" {
				t.Errorf("mixed node product label %q", labels[nodelabels.LabelProduct])
			}
			if got := labels[nodelabels.LabelComputeMajor] + "." + labels[nodelabels.LabelComputeMinor]; tt.cc != "" && got != tt.cc {
				t.Errorf("compute labels %q, want %q", got, tt.cc)
			}
			if inv.MIGEnabled() != tt.mig || strings.Contains(inv.SKU, ".mig") != tt.mig {
				t.Errorf("MIG enabled %v, SKU %q, want MIG %v", inv.MIGEnabled(), inv.SKU, tt.mig)
			}
			if tt.mig && len(inv.Devices[0].MIG.Devices) != tt.migCount {
				t.Errorf("MIG devices %+v, want %d", inv.Devices[0].MIG.Devices, tt.migCount)
			}
			if inv.Clique != tt.clique || labels["nvidia.com/gpu.clique"] != tt.clique || labels[nodelabels.LabelClique] != tt.clique {
				t.Errorf("clique %q (labels %q, %q), want %q", inv.Clique, labels["nvidia.com/gpu.clique"], labels[nodelabels.LabelClique], tt.clique)
			}
			for _, d := range inv.Devices {
				if d.UUID == "" || d.PCIBusID == "" || d.MemoryMiB == 0 || d.Architecture == "" {
					t.Errorf("device %d incomplete: %+v", d.Index, d)
				}
			}
		})
	}
}

func TestSKUKeyIdentity(t *testing.T) {
	h100 := func(seed int, driver string, cuda int, cfg gpus.Config) string {
		return detect(t, gonvmltest.NewServer(t, driver, cuda, seed, gpus.Multiple(8, cfg)...)).SKU
	}
	base := h100(1, "550.54.15", 12040, gpus.H100_SXM5_80GB)
	sm89 := gpus.H100_SXM5_80GB
	sm89.CudaMinor = 9 // same name, other compute capability
	tests := []struct {
		name string
		sku  string
		same bool
	}{
		{"identical hardware, different UUIDs and bus ids", h100(2, "550.54.15", 12040, gpus.H100_SXM5_80GB), true},
		{"driver patch release", h100(1, "550.90.07", 12040, gpus.H100_SXM5_80GB), true},
		{"other product (H200)", h100(1, "550.54.15", 12040, gpus.H200_SXM5_141GB), false},
		{"other compute capability", h100(1, "550.54.15", 12040, sm89), false},
		{"other driver major", h100(1, "560.54.15", 12040, gpus.H100_SXM5_80GB), false},
		{"other CUDA driver version", h100(1, "550.54.15", 12060, gpus.H100_SXM5_80GB), false},
		{"4 instead of 8 GPUs", detect(t, gonvmltest.NewServer(t, "550.54.15", 12040, 3, gpus.Multiple(4, gpus.H100_SXM5_80GB)...)).SKU, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if (tt.sku == base) != tt.same {
				t.Errorf("base %q vs %q: same=%v, want %v", base, tt.sku, tt.sku == base, tt.same)
			}
		})
	}
}

func TestDetectFabric(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T) gonvml.Interface
		clique  string
		fabrics int
	}{
		{name: "driver without nvmlDeviceGetGpuFabricInfo: not called", fabrics: 0, setup: func(t *testing.T) gonvml.Interface {
			s := gonvmltest.NewServer(t, "525.60.13", 12000, 1, gpus.Multiple(2, gonvmltest.GB200)...)
			s.LookupSymbolFunc = func(string) error { return gonvml.ERROR_FUNCTION_NOT_FOUND }
			for i := range s.Devices {
				gonvmltest.Device(s, i).GetGpuFabricInfoFunc = nil // a call would panic and be recorded
			}
			return s
		}},
		{name: "fabric still registering", fabrics: 2, setup: func(t *testing.T) gonvml.Interface {
			s := gonvmltest.NewServer(t, "580.82.07", 13000, 1, gpus.Multiple(2, gonvmltest.GB200)...)
			for i := range s.Devices {
				gonvmltest.Device(s, i).GetGpuFabricInfoFunc = func() (gonvml.GpuFabricInfo, gonvml.Return) {
					return gonvml.GpuFabricInfo{State: gonvml.GPU_FABRIC_STATE_IN_PROGRESS}, gonvml.SUCCESS
				}
			}
			return s
		}},
		{name: "GPUs in different cliques: no node clique", fabrics: 2, setup: func(t *testing.T) gonvml.Interface {
			s := gonvmltest.NewServer(t, "580.82.07", 13000, 1, gpus.Multiple(2, gonvmltest.GB200)...)
			gonvmltest.AttachFabric(s, nvl72Cluster, 1)
			gonvmltest.Device(s, 1).GetGpuFabricInfoFunc = func() (gonvml.GpuFabricInfo, gonvml.Return) {
				return gonvml.GpuFabricInfo{ClusterUuid: nvl72Cluster, CliqueId: 2, State: gonvml.GPU_FABRIC_STATE_COMPLETED}, gonvml.SUCCESS
			}
			return s
		}},
		{name: "PCIe GPUs: ERROR_NOT_SUPPORTED tolerated", fabrics: 0, setup: func(t *testing.T) gonvml.Interface {
			return gonvmltest.NewServer(t, "580.82.07", 13000, 1, gpus.H100_SXM5_80GB)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := detect(t, tt.setup(t))
			n := 0
			for _, d := range inv.Devices {
				if d.Fabric != nil {
					n++
				}
			}
			if inv.Clique != tt.clique || n != tt.fabrics || len(inv.Problems) > 0 || !nvml.Cacheable(inv.SKU) {
				t.Errorf("clique %q fabrics %d problems %v sku %q; want clique %q fabrics %d", inv.Clique, n, inv.Problems, inv.SKU, tt.clique, tt.fabrics)
			}
		})
	}
}

// TestDetectThisMachine runs the real library: on a machine without libnvidia-ml it must report no
// GPU without an error; on a GPU machine it must produce a cacheable key.
func TestDetectThisMachine(t *testing.T) {
	inv, err := New().Detect(context.Background())
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if inv.Present {
		t.Logf("GPU machine: %s", inv.Summary())
		if !nvml.Cacheable(inv.SKU) {
			t.Errorf("SKU %q on a GPU machine", inv.SKU)
		}
		return
	}
	if inv.SKU != nvml.SKUNone || !strings.Contains(inv.Reason, nvml.NoGPUReason) {
		t.Errorf("no-GPU machine: sku %q reason %q", inv.SKU, inv.Reason)
	}
}
