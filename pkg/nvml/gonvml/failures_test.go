//go:build cgo && linux

package gonvml

import (
	"context"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/nvml/gonvml/gonvmltest"
)

// TestDetectCallFailures injects a failure into one NVML call at a time. Detection must not panic, must
// keep what it could read, must name the failed call in the error and in Problems, and must give
// SKUUnknown exactly when the failed call feeds the SKU key.
func TestDetectCallFailures(t *testing.T) {
	fail := gonvml.ERROR_UNKNOWN
	tests := []struct {
		name    string
		inject  func(s *server.Server)
		call    string // substring of the recorded problem; "" means no problem
		unknown bool   // SKU must be SKUUnknown
		present bool
		devices int
	}{
		{name: "driver version", call: "SystemGetDriverVersion", unknown: true, present: true, devices: 2,
			inject: func(s *server.Server) {
				s.SystemGetDriverVersionFunc = func() (string, gonvml.Return) { return "", fail }
			}},
		{name: "CUDA driver version", call: "SystemGetCudaDriverVersion", unknown: true, present: true, devices: 2,
			inject: func(s *server.Server) {
				s.SystemGetCudaDriverVersionFunc = func() (int, gonvml.Return) { return 0, fail }
			}},
		{name: "NVML version (not in key)", call: "SystemGetNVMLVersion", present: true, devices: 2,
			inject: func(s *server.Server) {
				s.SystemGetNVMLVersionFunc = func() (string, gonvml.Return) { return "", fail }
			}},
		{name: "device count", call: "DeviceGetCount", unknown: true,
			inject: func(s *server.Server) { s.DeviceGetCountFunc = func() (int, gonvml.Return) { return 0, fail } }},
		{name: "handle of GPU 1", call: "DeviceGetHandleByIndex(1)", unknown: true, present: true, devices: 1,
			inject: func(s *server.Server) {
				orig := s.DeviceGetHandleByIndexFunc
				s.DeviceGetHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
					if i == 1 {
						return nil, gonvml.ERROR_GPU_IS_LOST
					}
					return orig(i)
				}
			}},
		{name: "name of GPU 1", call: "GPU 1 GetName", unknown: true, present: true, devices: 2,
			inject: func(s *server.Server) {
				gonvmltest.Device(s, 1).GetNameFunc = func() (string, gonvml.Return) { return "", gonvml.ERROR_GPU_IS_LOST }
			}},
		{name: "compute capability", call: "GPU 0 GetCudaComputeCapability", unknown: true, present: true, devices: 2,
			inject: func(s *server.Server) {
				gonvmltest.Device(s, 0).GetCudaComputeCapabilityFunc = func() (int, int, gonvml.Return) { return 0, 0, fail }
			}},
		{name: "UUID (not in key)", call: "GPU 0 GetUUID", present: true, devices: 2,
			inject: func(s *server.Server) {
				gonvmltest.Device(s, 0).GetUUIDFunc = func() (string, gonvml.Return) { return "", fail }
			}},
		{name: "memory (not in key)", call: "GPU 1 GetMemoryInfo", present: true, devices: 2,
			inject: func(s *server.Server) {
				gonvmltest.Device(s, 1).GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{}, fail }
			}},
		{name: "architecture (falls back to compute capability)", call: "GPU 0 GetArchitecture", present: true, devices: 2,
			inject: func(s *server.Server) {
				gonvmltest.Device(s, 0).GetArchitectureFunc = func() (gonvml.DeviceArchitecture, gonvml.Return) { return 0, fail }
			}},
		{name: "PCI info (not in key)", call: "GPU 0 GetPciInfo", present: true, devices: 2,
			inject: func(s *server.Server) {
				gonvmltest.Device(s, 0).GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) { return gonvml.PciInfo{}, fail }
			}},
		{name: "MIG mode unreadable", call: "GPU 0 GetMigMode", unknown: true, present: true, devices: 2,
			inject: func(s *server.Server) {
				gonvmltest.Device(s, 0).GetMigModeFunc = func() (int, int, gonvml.Return) { return 0, 0, fail }
			}},
		{name: "MIG not supported is an answer", present: true, devices: 2,
			inject: func(s *server.Server) {
				gonvmltest.Device(s, 0).GetMigModeFunc = func() (int, int, gonvml.Return) { return 0, 0, gonvml.ERROR_NOT_SUPPORTED }
			}},
		{name: "MIG device count", call: "GPU 0 GetMaxMigDeviceCount", unknown: true, present: true, devices: 2,
			inject: func(s *server.Server) {
				gonvmltest.Device(s, 0).GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 0, fail }
			}},
		{name: "MIG device handle", call: "GPU 0 GetMigDeviceHandleByIndex(0)", unknown: true, present: true, devices: 2,
			inject: func(s *server.Server) {
				gonvmltest.Device(s, 0).GetMigDeviceHandleByIndexFunc = func(int) (gonvml.Device, gonvml.Return) { return nil, fail }
			}},
		{name: "fabric info error (not in key)", call: "GPU 1 GetGpuFabricInfo", present: true, devices: 2,
			inject: func(s *server.Server) {
				gonvmltest.Device(s, 1).GetGpuFabricInfoFunc = func() (gonvml.GpuFabricInfo, gonvml.Return) { return gonvml.GpuFabricInfo{}, fail }
			}},
		{name: "a call the mock lacks panics: recorded, not raised", call: "GPU 1 GetUUID: panicked", present: true, devices: 2,
			inject: func(s *server.Server) { gonvmltest.Device(s, 1).GetUUIDFunc = nil }},
		{name: "shutdown", call: "Shutdown", present: true, devices: 2,
			inject: func(s *server.Server) { s.ShutdownFunc = func() gonvml.Return { return fail } }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := gonvmltest.NewServer(t, "570.124.06", 12080, 1, gpus.Multiple(2, gpus.H100_SXM5_80GB)...)
			if strings.Contains(tt.call, "Mig") {
				gonvmltest.EnableMIG(t, s, 0, gonvml.GPU_INSTANCE_PROFILE_1_SLICE)
			}
			tt.inject(s)
			inv, err := NewWithLibrary(s).Detect(context.Background())
			if tt.call == "" {
				if err != nil || len(inv.Problems) > 0 {
					t.Fatalf("err %v, problems %v; want none", err, inv.Problems)
				}
			} else if err == nil || !strings.Contains(err.Error(), tt.call) || !strings.Contains(strings.Join(inv.Problems, "\n"), tt.call) {
				t.Fatalf("err %v, problems %v; want both to name %q", err, inv.Problems, tt.call)
			}
			if (inv.SKU == nvml.SKUUnknown) != tt.unknown || inv.Present != tt.present || len(inv.Devices) != tt.devices {
				t.Errorf("sku %q present %v devices %d; want unknown=%v present=%v devices=%d",
					inv.SKU, inv.Present, len(inv.Devices), tt.unknown, tt.present, tt.devices)
			}
			if inv.Present && len(inv.Devices) > 0 && inv.Devices[len(inv.Devices)-1].Product == "" && !tt.unknown {
				t.Errorf("partial info lost: %+v", inv.Devices)
			}
			if err := nvml.IdentityLabels(inv, nvml.LabelOptions{GFD: true}).Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestDetectInit(t *testing.T) {
	tests := []struct {
		name    string
		init    func() gonvml.Return
		sku     string
		wantErr bool
		reason  string
	}{
		{"no libnvidia-ml", func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }, nvml.SKUNone, false, nvml.NoGPUReason},
		{"driver not loaded", func() gonvml.Return { return gonvml.ERROR_DRIVER_NOT_LOADED }, nvml.SKUNone, false, "kernel driver is not loaded"},
		{"no permission", func() gonvml.Return { return gonvml.ERROR_NO_PERMISSION }, nvml.SKUUnknown, true, "could not be initialized"},
		{"init panics", func() gonvml.Return { panic("boom") }, nvml.SKUUnknown, true, "init failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := gonvmltest.NewServer(t, "570.124.06", 12080, 1, gpus.H100_SXM5_80GB)
			s.InitFunc = tt.init
			s.ShutdownFunc = nil // must not be called after a failed Init
			inv, err := NewWithLibrary(s).Detect(context.Background())
			if (err != nil) != tt.wantErr || inv.SKU != tt.sku || inv.Present || !strings.Contains(inv.Reason, tt.reason) {
				t.Errorf("err %v sku %q present %v reason %q; want err=%v sku %q reason ~%q",
					err, inv.SKU, inv.Present, inv.Reason, tt.wantErr, tt.sku, tt.reason)
			}
		})
	}
	t.Run("no GPUs", func(t *testing.T) {
		inv, err := NewWithLibrary(gonvmltest.NewServer(t, "570.124.06", 12080, 1)).Detect(context.Background())
		if err != nil || inv.Present || inv.SKU != nvml.SKUNone || inv.Reason == "" {
			t.Errorf("err %v present %v sku %q reason %q", err, inv.Present, inv.SKU, inv.Reason)
		}
	})
}
