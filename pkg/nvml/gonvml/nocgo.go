//go:build !(cgo && linux)

// Package gonvml is the real GPU inventory backend over github.com/NVIDIA/go-nvml. This build has no
// cgo (or is not Linux), so NVML cannot be loaded and the detector reports no GPU, saying why.
package gonvml

import (
	"context"

	"warmd.io/warmd/pkg/nvml"
)

// Backend is the Inventory.Backend value of this detector.
const Backend = "nvml"

// Detector reports no NVML in builds without cgo.
type Detector struct{}

var _ nvml.Detector = (*Detector)(nil)

// New returns the detector; see the package comment.
func New() *Detector { return &Detector{} }

// Detect reports no GPU.
func (*Detector) Detect(context.Context) (nvml.Inventory, error) {
	return nvml.Absent("null", nvml.NoGPUReason+": this warmd was built without cgo, so NVML cannot be loaded (build with CGO_ENABLED=1)"), nil
}
