//go:build cgo && linux

// Package gonvml is the real GPU inventory backend: it reads the node's GPUs through
// github.com/NVIDIA/go-nvml (libnvidia-ml.so.1, loaded at run time with dlopen). It owns the NVML call
// sequence and its failure handling, not the types, the SKU key or the labels (package nvml).
//
// go-nvml needs cgo; builds without cgo get nocgo.go, which reports no NVML.
package gonvml

import (
	"context"
	"errors"
	"fmt"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"warmd.io/warmd/pkg/nvml"
)

// Backend is the Inventory.Backend value of this detector.
const Backend = "nvml"

// Detector reads the inventory through an nvml.Interface: the real library in production, go-nvml's
// mock package in tests.
type Detector struct {
	lib gonvml.Interface
}

var _ nvml.Detector = (*Detector)(nil)

// New returns a detector over the system's libnvidia-ml.so.1. Loading is deferred to Detect, so New
// never fails; on a node without the library Detect reports no GPU.
func New() *Detector { return &Detector{lib: gonvml.New()} }

// NewWithLibrary returns a detector over lib (a mock in tests, or a library at a custom path via
// gonvml.New(gonvml.WithLibraryPath(...))).
func NewWithLibrary(lib gonvml.Interface) *Detector { return &Detector{lib: lib} }

// Detect initializes NVML, reads the inventory and shuts NVML down again. Failed calls are recorded in
// Inventory.Problems and joined into the returned error; what could be read is kept.
func (d *Detector) Detect(ctx context.Context) (inv nvml.Inventory, err error) {
	c := &collector{lib: d.lib}
	ret, perr := guard(func() gonvml.Return { return d.lib.Init() })
	switch {
	case perr != nil:
		inv = nvml.Absent(Backend, "NVML init failed")
		inv.SKU = nvml.SKUUnknown
		return inv, fmt.Errorf("nvml init: %w", perr)
	case ret == gonvml.ERROR_LIBRARY_NOT_FOUND:
		return nvml.Absent(Backend, nvml.NoGPUReason+": libnvidia-ml.so.1 is not installed or not on the library path"), nil
	case ret == gonvml.ERROR_DRIVER_NOT_LOADED:
		return nvml.Absent(Backend, nvml.NoGPUReason+": NVML is installed but the NVIDIA kernel driver is not loaded"), nil
	case ret != gonvml.SUCCESS:
		inv = nvml.Absent(Backend, "NVML could not be initialized: "+ret.Error())
		inv.SKU = nvml.SKUUnknown
		return inv, fmt.Errorf("nvml init: %s (check that the driver is healthy and warmd can open /dev/nvidia*)", ret.Error())
	}
	defer func() {
		if r, perr := guard(func() gonvml.Return { return d.lib.Shutdown() }); perr == nil && r != gonvml.SUCCESS {
			c.fail("Shutdown", r)
			inv.Problems, err = c.problems, c.err()
		}
	}()
	inv = c.collect(ctx)
	return inv, c.err()
}

// collector accumulates the problems of one detection.
type collector struct {
	lib      gonvml.Interface
	problems []string
	errs     []error
}

func (c *collector) fail(call string, what any) {
	e := fmt.Errorf("%s: %v", call, what)
	c.problems = append(c.problems, e.Error())
	c.errs = append(c.errs, e)
}

func (c *collector) err() error { return errors.Join(c.errs...) }

// ok reports whether an NVML call succeeded and records it otherwise. A panic inside the call (a
// binding or mock defect) is recorded the same way, so detection never takes the daemon down.
func (c *collector) ok(call string, f func() gonvml.Return) bool {
	ret, perr := guard(f)
	if perr != nil {
		c.fail(call, perr)
		return false
	}
	if ret != gonvml.SUCCESS {
		c.fail(call, ret.Error())
		return false
	}
	return true
}

// quiet runs an NVML call whose ERROR_NOT_SUPPORTED is an answer, not a problem: it returns
// (supported, succeeded) and records only real failures.
func (c *collector) quiet(call string, f func() gonvml.Return) (supported, ok bool) {
	ret, perr := guard(f)
	switch {
	case perr != nil:
		c.fail(call, perr)
		return true, false
	case ret == gonvml.ERROR_NOT_SUPPORTED || ret == gonvml.ERROR_FUNCTION_NOT_FOUND:
		return false, false
	case ret != gonvml.SUCCESS:
		c.fail(call, ret.Error())
		return true, false
	}
	return true, true
}

func guard(f func() gonvml.Return) (ret gonvml.Return, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return f(), nil
}

func (c *collector) collect(ctx context.Context) nvml.Inventory {
	inv := nvml.Inventory{Backend: Backend, Devices: []nvml.Device{}}
	c.ok("SystemGetDriverVersion", func() (r gonvml.Return) { inv.DriverVersion, r = c.lib.SystemGetDriverVersion(); return })
	var cuda int
	if c.ok("SystemGetCudaDriverVersion", func() (r gonvml.Return) { cuda, r = c.lib.SystemGetCudaDriverVersion(); return }) {
		inv.CUDADriverVersion = nvml.FormatCUDAVersion(cuda)
	}
	c.ok("SystemGetNVMLVersion", func() (r gonvml.Return) { inv.NVMLVersion, r = c.lib.SystemGetNVMLVersion(); return })
	countOK := c.ok("DeviceGetCount", func() (r gonvml.Return) { inv.DeviceCount, r = c.lib.DeviceGetCount(); return })
	fabricCall := c.fabricSupported()
	for i := 0; countOK && i < inv.DeviceCount && ctx.Err() == nil; i++ {
		var dev gonvml.Device
		if !c.ok(fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), func() (r gonvml.Return) { dev, r = c.lib.DeviceGetHandleByIndex(i); return }) || dev == nil {
			continue
		}
		inv.Devices = append(inv.Devices, c.device(i, dev, fabricCall))
	}
	if ctx.Err() != nil {
		c.fail("Detect", ctx.Err())
	}
	switch {
	case countOK && inv.DeviceCount == 0:
		inv.Reason = "NVML is loaded but reports no GPUs"
		inv.SKU = nvml.SKUNone
	case !countOK:
		inv.Reason = "NVML could not count the GPUs"
		inv.SKU = nvml.SKUUnknown
	default:
		inv.Present = true
		inv.SKU = nvml.SKUKey(inv)
	}
	inv.Clique = clique(inv.Devices)
	inv.Problems = c.problems
	return inv
}

func (c *collector) device(i int, dev gonvml.Device, fabric bool) nvml.Device {
	d := nvml.Device{Index: i}
	p := func(call string) string { return fmt.Sprintf("GPU %d %s", i, call) }
	c.ok(p("GetName"), func() (r gonvml.Return) { d.Product, r = dev.GetName(); return })
	c.ok(p("GetUUID"), func() (r gonvml.Return) { d.UUID, r = dev.GetUUID(); return })
	var major, minor int
	if c.ok(p("GetCudaComputeCapability"), func() (r gonvml.Return) { major, minor, r = dev.GetCudaComputeCapability(); return }) {
		d.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	var mem gonvml.Memory
	if c.ok(p("GetMemoryInfo"), func() (r gonvml.Return) { mem, r = dev.GetMemoryInfo(); return }) {
		d.MemoryMiB = mem.Total / (1 << 20)
	}
	var arch gonvml.DeviceArchitecture
	if sup, ok := c.quiet(p("GetArchitecture"), func() (r gonvml.Return) { arch, r = dev.GetArchitecture(); return }); ok {
		d.Architecture = archName(arch)
	} else if !sup || d.Architecture == "" {
		d.Architecture = familyFromCC(major, minor, d.ComputeCapability != "")
	}
	var pci gonvml.PciInfo
	if c.ok(p("GetPciInfo"), func() (r gonvml.Return) { pci, r = dev.GetPciInfo(); return }) {
		d.PCIBusID = cString(pci.BusId[:])
		d.PCIDeviceID = fmt.Sprintf("0x%08x", pci.PciDeviceId)
	}
	d.MIG = c.mig(i, dev)
	if fabric {
		d.Fabric = c.fabric(i, dev)
	}
	return d
}

func (c *collector) mig(i int, dev gonvml.Device) *nvml.MIG {
	var current, pending int
	sup, ok := c.quiet(fmt.Sprintf("GPU %d GetMigMode", i), func() (r gonvml.Return) { current, pending, r = dev.GetMigMode(); return })
	if !sup {
		return nil
	}
	if !ok {
		return &nvml.MIG{Incomplete: true}
	}
	_ = pending // a pending change takes effect only after a GPU reset; the current mode is what CUDA sees
	m := &nvml.MIG{Enabled: current == gonvml.DEVICE_MIG_ENABLE}
	if !m.Enabled {
		return m
	}
	var max int
	if !c.ok(fmt.Sprintf("GPU %d GetMaxMigDeviceCount", i), func() (r gonvml.Return) { max, r = dev.GetMaxMigDeviceCount(); return }) {
		m.Incomplete = true
		return m
	}
	for j := 0; j < max; j++ {
		var md gonvml.Device
		ret, perr := guard(func() (r gonvml.Return) { md, r = dev.GetMigDeviceHandleByIndex(j); return })
		if perr == nil && ret == gonvml.ERROR_NOT_FOUND {
			continue // an empty slot
		}
		call := fmt.Sprintf("GPU %d GetMigDeviceHandleByIndex(%d)", i, j)
		if perr != nil || ret != gonvml.SUCCESS || md == nil {
			c.fail(call, firstNonNil(perr, ret))
			m.Incomplete = true
			continue
		}
		m.Devices = append(m.Devices, c.migDevice(i, j, md))
		if m.Devices[len(m.Devices)-1].Profile == "" {
			m.Incomplete = true
		}
	}
	return m
}

func (c *collector) migDevice(i, j int, md gonvml.Device) nvml.MIGDevice {
	m := nvml.MIGDevice{Index: j}
	p := func(call string) string { return fmt.Sprintf("GPU %d MIG %d %s", i, j, call) }
	c.ok(p("GetUUID"), func() (r gonvml.Return) { m.UUID, r = md.GetUUID(); return })
	c.ok(p("GetGpuInstanceId"), func() (r gonvml.Return) { m.GPUInstanceID, r = md.GetGpuInstanceId(); return })
	c.ok(p("GetComputeInstanceId"), func() (r gonvml.Return) { m.ComputeInstanceID, r = md.GetComputeInstanceId(); return })
	var name string
	if c.ok(p("GetName"), func() (r gonvml.Return) { name, r = md.GetName(); return }) {
		// NVML names a MIG device "<product> MIG <profile>", e.g. "NVIDIA H100 80GB HBM3 MIG 1g.10gb".
		if _, prof, found := strings.Cut(name, " MIG "); found {
			m.Profile = strings.TrimSpace(prof)
		}
	}
	var attr gonvml.DeviceAttributes
	if c.ok(p("GetAttributes"), func() (r gonvml.Return) { attr, r = md.GetAttributes(); return }) {
		m.MemoryMiB = attr.MemorySizeMB
		if m.Profile == "" && attr.GpuInstanceSliceCount > 0 {
			m.Profile = fmt.Sprintf("%dg.%dgb", attr.GpuInstanceSliceCount, (attr.MemorySizeMB+1023)/1024)
		}
	}
	return m
}

// fabricSupported reports whether the driver exports nvmlDeviceGetGpuFabricInfo. Calling a symbol
// the loaded library lacks would abort the process, so older drivers are asked first.
func (c *collector) fabricSupported() bool {
	var ext gonvml.ExtendedInterface
	var lookupErr error
	if _, perr := guard(func() gonvml.Return {
		ext = c.lib.Extensions()
		lookupErr = ext.LookupSymbol("nvmlDeviceGetGpuFabricInfo")
		return gonvml.SUCCESS
	}); perr != nil || lookupErr != nil {
		return false
	}
	return true
}

func (c *collector) fabric(i int, dev gonvml.Device) *nvml.Fabric {
	var fi gonvml.GpuFabricInfo
	if _, ok := c.quiet(fmt.Sprintf("GPU %d GetGpuFabricInfo", i), func() (r gonvml.Return) { fi, r = dev.GetGpuFabricInfo(); return }); !ok {
		return nil
	}
	f := &nvml.Fabric{State: fabricState(fi.State), CliqueID: fi.CliqueId}
	if fi.ClusterUuid != [16]uint8{} {
		u := fi.ClusterUuid
		f.ClusterUUID = fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	}
	if fi.State == gonvml.GPU_FABRIC_STATE_COMPLETED && gonvml.Return(fi.Status) != gonvml.SUCCESS {
		f.Status = gonvml.Return(fi.Status).Error()
	}
	if f.State == "not-supported" {
		return nil
	}
	return f
}

// clique is GFD's nvidia.com/gpu.clique value: "<clusterUUID>.<cliqueId>" when every fabric-attached
// GPU agrees, else "".
func clique(devs []nvml.Device) string {
	v := ""
	for _, d := range devs {
		if !d.Fabric.Attached() {
			continue
		}
		this := fmt.Sprintf("%s.%d", d.Fabric.ClusterUUID, d.Fabric.CliqueID)
		if v != "" && v != this {
			return ""
		}
		v = this
	}
	return v
}

func fabricState(s uint8) string {
	switch s {
	case gonvml.GPU_FABRIC_STATE_NOT_SUPPORTED:
		return "not-supported"
	case gonvml.GPU_FABRIC_STATE_NOT_STARTED:
		return "not-started"
	case gonvml.GPU_FABRIC_STATE_IN_PROGRESS:
		return "in-progress"
	case gonvml.GPU_FABRIC_STATE_COMPLETED:
		return "completed"
	}
	return fmt.Sprintf("state-%d", s)
}

// archName uses GFD's nvidia.com/gpu.family spellings.
func archName(a gonvml.DeviceArchitecture) string {
	switch a {
	case gonvml.DEVICE_ARCH_KEPLER:
		return "kepler"
	case gonvml.DEVICE_ARCH_MAXWELL:
		return "maxwell"
	case gonvml.DEVICE_ARCH_PASCAL:
		return "pascal"
	case gonvml.DEVICE_ARCH_VOLTA:
		return "volta"
	case gonvml.DEVICE_ARCH_TURING:
		return "turing"
	case gonvml.DEVICE_ARCH_AMPERE:
		return "ampere"
	case gonvml.DEVICE_ARCH_ADA:
		return "ada-lovelace"
	case gonvml.DEVICE_ARCH_HOPPER:
		return "hopper"
	case gonvml.DEVICE_ARCH_BLACKWELL:
		return "blackwell"
	case gonvml.DEVICE_ARCH_RUBIN:
		return "rubin"
	}
	return ""
}

// familyFromCC is GFD's fallback when NVML cannot name the architecture.
func familyFromCC(major, minor int, ok bool) string {
	if !ok {
		return ""
	}
	switch {
	case major == 7 && minor < 5:
		return "volta"
	case major == 7:
		return "turing"
	case major == 8 && minor == 9:
		return "ada-lovelace"
	case major == 8:
		return "ampere"
	case major == 9:
		return "hopper"
	case major == 10 || major == 12:
		return "blackwell"
	}
	return ""
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func firstNonNil(err error, ret gonvml.Return) any {
	if err != nil {
		return err
	}
	return ret.Error()
}
