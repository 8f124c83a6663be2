//go:build cgo && linux

package gonvmltest

import (
	"fmt"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// NewServer builds a go-nvml mock server with deterministic UUIDs and bus ids (seed varies them, so
// two servers of identical hardware differ only in those), PCI bus ids like a real system, and no
// NVLink fabric (GetGpuFabricInfo answers ERROR_NOT_SUPPORTED, as on PCIe and HGX nodes).
func NewServer(t testing.TB, driver string, cuda int, seed int, cfgs ...gpus.Config) *server.Server {
	t.Helper()
	s, err := server.New(server.WithGPUs(cfgs...), server.WithDriverVersion(driver),
		server.WithNVMLVersion("12."+driver), server.WithCUDADriverVersion(cuda))
	if err != nil {
		t.Fatal(err)
	}
	Tidy(s, seed)
	return s
}

// Tidy makes a dgx* mock server deterministic and adds what its devices lack.
func Tidy(s *server.Server, seed int) *server.Server {
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.UUID = fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", seed, i)
		dev.PciBusID = fmt.Sprintf("00000000:%02X:00.0", 0x10+seed*0x40+i)
		busID := dev.PciBusID
		pciID := dev.Config.PciDeviceId
		dev.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
			p := gonvml.PciInfo{PciDeviceId: pciID}
			for j, c := range busID {
				p.BusId[j] = int8(c)
			}
			return p, gonvml.SUCCESS
		}
		dev.GetGpuFabricInfoFunc = func() (gonvml.GpuFabricInfo, gonvml.Return) {
			return gonvml.GpuFabricInfo{}, gonvml.ERROR_NOT_SUPPORTED
		}
	}
	return s
}

// Device returns the mock device i of s.
func Device(s *server.Server, i int) *server.Device { return s.Devices[i].(*server.Device) }

// EnableMIG switches GPU i to MIG mode and creates one GPU instance (and a compute instance in it)
// per given profile id through the mock's own MIG API; the MIG device handles NVML would return for
// them are wired into GetMaxMigDeviceCount / GetMigDeviceHandleByIndex.
func EnableMIG(t testing.TB, s *server.Server, i int, profileIDs ...int) {
	t.Helper()
	dev := Device(s, i)
	if ret, _ := dev.SetMigMode(gonvml.DEVICE_MIG_ENABLE); ret != gonvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	var migs []gonvml.Device
	for j, id := range profileIDs {
		pi, ret := dev.GetGpuInstanceProfileInfo(id)
		if ret != gonvml.SUCCESS {
			t.Fatalf("profile %d: %v", id, ret)
		}
		gi, ret := dev.CreateGpuInstance(&pi)
		if ret != gonvml.SUCCESS {
			t.Fatalf("CreateGpuInstance: %v", ret)
		}
		cpi, ret := gi.GetComputeInstanceProfileInfo(gonvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != gonvml.SUCCESS {
			t.Fatalf("compute profile: %v", ret)
		}
		ci, ret := gi.CreateComputeInstance(&cpi)
		if ret != gonvml.SUCCESS {
			t.Fatalf("CreateComputeInstance: %v", ret)
		}
		giInfo, _ := gi.GetInfo()
		ciInfo, _ := ci.GetInfo()
		profile := fmt.Sprintf("%dg.%dgb", pi.SliceCount, (pi.MemorySizeMB+1023)/1024)
		uuid := fmt.Sprintf("MIG-%08x-0000-4000-8000-%012x", i, j)
		name := dev.Config.Name + " MIG " + profile
		migs = append(migs, &mock.Device{
			GetUUIDFunc:              func() (string, gonvml.Return) { return uuid, gonvml.SUCCESS },
			GetNameFunc:              func() (string, gonvml.Return) { return name, gonvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, gonvml.Return) { return int(giInfo.Id), gonvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, gonvml.Return) { return int(ciInfo.Id), gonvml.SUCCESS },
			GetAttributesFunc: func() (gonvml.DeviceAttributes, gonvml.Return) {
				return gonvml.DeviceAttributes{GpuInstanceSliceCount: pi.SliceCount, MemorySizeMB: pi.MemorySizeMB}, gonvml.SUCCESS
			},
		})
	}
	const maxMIG = 7
	dev.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return maxMIG, gonvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(n int) (gonvml.Device, gonvml.Return) {
		if n < 0 || n >= maxMIG {
			return nil, gonvml.ERROR_INVALID_ARGUMENT
		}
		if n >= len(migs) {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return migs[n], gonvml.SUCCESS
	}
}

// AttachFabric registers every GPU of s with an NVLink fabric (an NVL72 compute tray).
func AttachFabric(s *server.Server, cluster [16]uint8, clique uint32) {
	for i := range s.Devices {
		Device(s, i).GetGpuFabricInfoFunc = func() (gonvml.GpuFabricInfo, gonvml.Return) {
			return gonvml.GpuFabricInfo{ClusterUuid: cluster, CliqueId: clique, State: gonvml.GPU_FABRIC_STATE_COMPLETED,
				Status: uint32(gonvml.SUCCESS)}, gonvml.SUCCESS
		}
	}
}

// GB200 is an NVL72 compute-tray GPU; go-nvml's mocks have no Grace-Blackwell config.
var GB200 = gpus.Config{
	Name: "NVIDIA GB200", Architecture: gonvml.DEVICE_ARCH_BLACKWELL, Brand: gonvml.BRAND_NVIDIA,
	MemoryMB: 189471, CudaMajor: 10, CudaMinor: 0, PciDeviceId: 0x294110DE,
}
