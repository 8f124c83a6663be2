package nvml

import "context"

// Null is the detector for nodes and builds without NVML: it always reports no GPU, with Reason saying
// why, so CPU nodes and CI run the same code path as GPU nodes.
type Null struct {
	// Reason is reported as the inventory's Reason; empty means a generic "no NVML" message.
	Reason string
}

var _ Detector = Null{}

// NoGPUReason is the message for a node where no NVIDIA GPU or NVML library was found.
const NoGPUReason = "no NVIDIA GPU/NVML was found on this node"

// Detect returns an inventory without GPUs. It never fails.
func (n Null) Detect(context.Context) (Inventory, error) {
	return Absent("null", cmpOr(n.Reason, NoGPUReason)), nil
}

// Absent returns the inventory of a node without GPUs, for backend with reason.
func Absent(backend, reason string) Inventory {
	return Inventory{Backend: backend, Reason: reason, SKU: SKUNone, Devices: []Device{}}
}
