// Package nvml owns the node's GPU identity: the inventory of NVIDIA GPUs as NVML reports it, the SKU
// fingerprint that keys compile caches (sku.go), and the identity labels warmd publishes (labels.go).
// It also runs the daemon part that detects the inventory at start and re-detects it periodically
// (part.go).
//
// This package holds the types and the seam (Detector) and does not import go-nvml, so callers such as
// pkg/cache and pkg/status never need cgo. The real backend lives in pkg/nvml/gonvml; Null (null.go) is
// the fallback for CPU nodes and builds without cgo, so every node runs the same code path and reports
// "no GPU" honestly. It does not write labels onto the Node: pkg/readiness does that.
package nvml

import (
	"context"
	"fmt"
)

// Detector reads the node's GPU inventory. Implementations never panic on NVML failures: they return
// what they could read, record each failed call in Inventory.Problems, and return a non-nil error
// joining those failures. A node without NVIDIA GPUs or without NVML is not an error: it is an
// Inventory with Present false, SKU SKUNone and a Reason.
type Detector interface {
	Detect(ctx context.Context) (Inventory, error)
}

// Inventory is one reading of the node's GPUs. Its JSON form is what `warmd gpu -o json` prints and
// what the gpu status section carries.
type Inventory struct {
	// Backend that produced it: "nvml" (go-nvml over libnvidia-ml) or "null" (no NVML in this build or
	// on this node).
	Backend string `json:"backend"`
	// Present is true when NVML answered and reported at least one GPU.
	Present bool `json:"present"`
	// Reason says, in words, why Present is false.
	Reason string `json:"reason,omitempty"`
	// SKU is the node's SKU fingerprint (see SKUKey): SKUNone without GPUs, SKUUnknown when a field
	// that enters the key could not be read.
	SKU string `json:"sku"`
	// DriverVersion is the kernel driver version, e.g. "570.124.06" (nvmlSystemGetDriverVersion).
	DriverVersion string `json:"driverVersion,omitempty"`
	// CUDADriverVersion is the highest CUDA version the driver supports, e.g. "12.8"
	// (nvmlSystemGetCudaDriverVersion); it is not the toolkit inside an image.
	CUDADriverVersion string `json:"cudaDriverVersion,omitempty"`
	// NVMLVersion is the NVML library version, for diagnostics only.
	NVMLVersion string `json:"nvmlVersion,omitempty"`
	// DeviceCount is what nvmlDeviceGetCount reported (MIG devices are not counted).
	DeviceCount int      `json:"deviceCount"`
	Devices     []Device `json:"devices"`
	// Clique is the NVLink fabric clique shared by all fabric-attached GPUs ("<clusterUUID>.<cliqueId>",
	// GFD's nvidia.com/gpu.clique value); empty when no GPU is fabric-attached or the GPUs disagree.
	Clique string `json:"clique,omitempty"`
	// Problems lists each NVML call that failed, so partial information is visible as partial.
	Problems []string `json:"problems,omitempty"`
}

// Device is one physical GPU.
type Device struct {
	Index int `json:"index"`
	// Product is the marketing name NVML reports (nvmlDeviceGetName), e.g. "NVIDIA H100 80GB HBM3".
	// torch uses the same string in its compile-cache key.
	Product string `json:"product,omitempty"`
	UUID    string `json:"uuid,omitempty"`
	// MemoryMiB is the total framebuffer memory.
	MemoryMiB uint64 `json:"memoryMiB,omitempty"`
	// ComputeCapability is "major.minor", e.g. "9.0"; empty when it could not be read.
	ComputeCapability string `json:"computeCapability,omitempty"`
	// Architecture family in lower case ("ampere", "hopper", "blackwell").
	Architecture string `json:"architecture,omitempty"`
	// PCIBusID is the PCI address ("00000000:17:00.0"); PCIDeviceID the vendor/device id (0x233010de).
	PCIBusID    string `json:"pciBusId,omitempty"`
	PCIDeviceID string `json:"pciDeviceId,omitempty"`
	// MIG is the device's MIG state; nil when the GPU is not MIG-capable.
	MIG *MIG `json:"mig,omitempty"`
	// Fabric is the NVLink fabric (NVL72 and similar) state; nil when the driver or GPU lacks it.
	Fabric *Fabric `json:"fabric,omitempty"`
}

// MIG describes a MIG-capable GPU's mode and its MIG devices.
type MIG struct {
	Enabled bool        `json:"enabled"`
	Devices []MIGDevice `json:"devices,omitempty"`
	// Incomplete is true when the mode or a slice's profile could not be read, so the SKU is unknown.
	Incomplete bool `json:"incomplete,omitempty"`
}

// MIGDevice is one MIG slice as CUDA sees it.
type MIGDevice struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	// Profile is the MIG profile, e.g. "1g.10gb"; torch reports "<product> MIG <profile>" as the
	// device name, so it enters the SKU key.
	Profile           string `json:"profile,omitempty"`
	MemoryMiB         uint64 `json:"memoryMiB,omitempty"`
	GPUInstanceID     int    `json:"gpuInstanceId"`
	ComputeInstanceID int    `json:"computeInstanceId"`
}

// Fabric is a GPU's NVLink fabric registration (nvmlDeviceGetGpuFabricInfo).
type Fabric struct {
	// State is "not-supported", "not-started", "in-progress" or "completed".
	State       string `json:"state"`
	ClusterUUID string `json:"clusterUUID,omitempty"`
	CliqueID    uint32 `json:"cliqueId"`
	// Status is the fabric manager's result when State is completed ("" on success).
	Status string `json:"status,omitempty"`
}

// Attached reports whether the GPU is registered with an NVLink fabric that assigned it a clique.
func (f *Fabric) Attached() bool {
	return f != nil && f.State == "completed" && f.Status == "" && f.ClusterUUID != "" &&
		f.ClusterUUID != "00000000-0000-0000-0000-000000000000"
}

// CC returns the compute capability as numbers; ok is false when it is unknown.
func (d Device) CC() (major, minor int, ok bool) {
	if _, err := fmt.Sscanf(d.ComputeCapability, "%d.%d", &major, &minor); err != nil {
		return 0, 0, false
	}
	return major, minor, true
}

// Products returns the distinct product names in device order of first appearance.
func (inv Inventory) Products() []string {
	var out []string
	seen := map[string]bool{}
	for _, d := range inv.Devices {
		if d.Product != "" && !seen[d.Product] {
			seen[d.Product] = true
			out = append(out, d.Product)
		}
	}
	return out
}

// MIGEnabled reports whether any GPU runs in MIG mode.
func (inv Inventory) MIGEnabled() bool {
	for _, d := range inv.Devices {
		if d.MIG != nil && d.MIG.Enabled {
			return true
		}
	}
	return false
}

// Summary is a one-line description for logs and the status header.
func (inv Inventory) Summary() string {
	if !inv.Present {
		return fmt.Sprintf("no NVIDIA GPU: %s (SKU %s)", inv.Reason, inv.SKU)
	}
	return fmt.Sprintf("%d× %s, driver %s, CUDA %s (SKU %s)", inv.DeviceCount, productSummary(inv.Products()),
		orQ(inv.DriverVersion), orQ(inv.CUDADriverVersion), inv.SKU)
}

func productSummary(ps []string) string {
	switch len(ps) {
	case 0:
		return "?"
	case 1:
		return ps[0]
	}
	return fmt.Sprintf("mixed (%d products)", len(ps))
}

func orQ(s string) string {
	if s == "" {
		return "?"
	}
	return s
}
