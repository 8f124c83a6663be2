package nvml

import (
	"maps"
	"strconv"
	"strings"

	"warmd.io/warmd/pkg/nodelabels"
)

// Label keys warmd publishes for GPU identity under its own prefix, so it never fights GPU Feature
// Discovery over nvidia.com/* keys.
const (
	LabelPresent      = "warmd.io/gpu.present"
	LabelSKU          = "warmd.io/gpu.sku"
	LabelProduct      = "warmd.io/gpu.product"
	LabelCount        = "warmd.io/gpu.count"
	LabelMemory       = "warmd.io/gpu.memory"
	LabelFamily       = "warmd.io/gpu.family"
	LabelComputeMajor = "warmd.io/gpu.compute.major"
	LabelComputeMinor = "warmd.io/gpu.compute.minor"
	LabelDriverMajor  = "warmd.io/gpu.driver.major"
	LabelDriverMinor  = "warmd.io/gpu.driver.minor"
	LabelDriverRev    = "warmd.io/gpu.driver.rev"
	LabelCUDAMajor    = "warmd.io/gpu.cuda.major"
	LabelCUDAMinor    = "warmd.io/gpu.cuda.minor"
	LabelMIG          = "warmd.io/gpu.mig"
	LabelClique       = "warmd.io/gpu.clique"
)

// LabelOptions choose which label names are produced.
type LabelOptions struct {
	// GFD also emits NVIDIA GPU Feature Discovery's nvidia.com/* names (config gpu.gfdLabels), for
	// clusters that run no GFD. Never enable it where GFD runs: two writers would fight over the keys.
	GFD bool
}

// IdentityLabels returns the node's GPU identity labels for inv. Every key and value passes Kubernetes
// label validation (see Labels.Validate). Labels whose value would be ambiguous on a mixed node
// (compute capability, family) are left out rather than guessed; product becomes "mixed".
func IdentityLabels(inv Inventory, opt LabelOptions) nodelabels.Labels {
	l := nodelabels.Labels{
		LabelPresent: strconv.FormatBool(inv.Present),
		LabelSKU:     nodelabels.Value(cmpOr(inv.SKU, SKUKey(inv))),
	}
	if !inv.Present {
		return l
	}
	l[LabelCount] = strconv.Itoa(inv.DeviceCount)
	l[LabelMIG] = strconv.FormatBool(inv.MIGEnabled())
	product := ""
	switch ps := inv.Products(); len(ps) {
	case 0:
	case 1:
		product = nodelabels.Value(ps[0])
	default:
		product = "mixed"
	}
	setIf(l, LabelProduct, product)
	var memory uint64
	for _, d := range inv.Devices {
		if d.MemoryMiB > 0 && (memory == 0 || d.MemoryMiB < memory) {
			memory = d.MemoryMiB
		}
	}
	if memory > 0 {
		l[LabelMemory] = strconv.FormatUint(memory, 10)
	}
	cc, family := uniform(inv, func(d Device) string { return d.ComputeCapability }),
		uniform(inv, func(d Device) string { return d.Architecture })
	ccMajor, ccMinor, _ := strings.Cut(cc, ".")
	setIf(l, LabelComputeMajor, ccMajor)
	setIf(l, LabelComputeMinor, ccMinor)
	setIf(l, LabelFamily, nodelabels.Value(family))
	dv := strings.SplitN(inv.DriverVersion, ".", 3)
	for i, k := range []string{LabelDriverMajor, LabelDriverMinor, LabelDriverRev} {
		if i < len(dv) {
			setIf(l, k, nodelabels.Value(dv[i]))
		}
	}
	cudaMajor, cudaMinor, _ := strings.Cut(inv.CUDADriverVersion, ".")
	setIf(l, LabelCUDAMajor, nodelabels.Value(cudaMajor))
	setIf(l, LabelCUDAMinor, nodelabels.Value(cudaMinor))
	setIf(l, LabelClique, nodelabels.Value(inv.Clique))
	if opt.GFD {
		maps.Copy(l, gfdLabels(l, inv))
	}
	return l
}

// gfdLabels maps our values to GFD's names (k8s-device-plugin internal/lm): the driver version appears
// as cuda.driver.* and cuda.driver-version.*, the CUDA driver version as cuda.runtime.* and
// cuda.runtime-version.*, as GFD does.
func gfdLabels(ours nodelabels.Labels, inv Inventory) nodelabels.Labels {
	g := nodelabels.Labels{}
	copyAs := func(from, to string) {
		if v, ok := ours[from]; ok {
			g[to] = v
		}
	}
	copyAs(LabelCount, "nvidia.com/gpu.count")
	copyAs(LabelMemory, "nvidia.com/gpu.memory")
	copyAs(LabelFamily, "nvidia.com/gpu.family")
	copyAs(LabelComputeMajor, "nvidia.com/gpu.compute.major")
	copyAs(LabelComputeMinor, "nvidia.com/gpu.compute.minor")
	copyAs(LabelDriverMajor, "nvidia.com/cuda.driver.major")
	copyAs(LabelDriverMinor, "nvidia.com/cuda.driver.minor")
	copyAs(LabelDriverRev, "nvidia.com/cuda.driver.rev")
	copyAs(LabelDriverMajor, "nvidia.com/cuda.driver-version.major")
	copyAs(LabelDriverMinor, "nvidia.com/cuda.driver-version.minor")
	copyAs(LabelDriverRev, "nvidia.com/cuda.driver-version.revision")
	copyAs(LabelCUDAMajor, "nvidia.com/cuda.runtime.major")
	copyAs(LabelCUDAMinor, "nvidia.com/cuda.runtime.minor")
	copyAs(LabelCUDAMajor, "nvidia.com/cuda.runtime-version.major")
	copyAs(LabelCUDAMinor, "nvidia.com/cuda.runtime-version.minor")
	copyAs(LabelClique, "nvidia.com/gpu.clique")
	setIf(g, "nvidia.com/cuda.driver-version.full", nodelabels.Value(inv.DriverVersion))
	setIf(g, "nvidia.com/cuda.runtime-version.full", nodelabels.Value(inv.CUDADriverVersion))
	// GFD names the product after device 0 with spaces turned into dashes, also on mixed nodes.
	if len(inv.Devices) > 0 {
		setIf(g, "nvidia.com/gpu.product", nodelabels.Value(inv.Devices[0].Product))
	}
	return g
}

// uniform returns f's value when every device agrees on it, else "".
func uniform(inv Inventory, f func(Device) string) string {
	v := ""
	for i, d := range inv.Devices {
		if i == 0 {
			v = f(d)
		} else if f(d) != v {
			return ""
		}
	}
	return v
}

func setIf(l nodelabels.Labels, k, v string) {
	if v != "" {
		l[k] = v
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
