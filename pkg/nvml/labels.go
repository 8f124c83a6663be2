package nvml

import (
	"maps"
	"strconv"
	"strings"

	"warmd.io/warmd/pkg/nodelabels"
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
		nodelabels.LabelPresent: strconv.FormatBool(inv.Present),
		nodelabels.LabelSKU:     nodelabels.Value(cmpOr(inv.SKU, SKUKey(inv))),
	}
	if !inv.Present {
		return l
	}
	l[nodelabels.LabelCount] = strconv.Itoa(inv.DeviceCount)
	l[nodelabels.LabelMIG] = strconv.FormatBool(inv.MIGEnabled())
	product := ""
	switch ps := inv.Products(); len(ps) {
	case 0:
	case 1:
		product = nodelabels.Value(ps[0])
	default:
		product = "mixed"
	}
	setIf(l, nodelabels.LabelProduct, product)
	var memory uint64
	for _, d := range inv.Devices {
		if d.MemoryMiB > 0 && (memory == 0 || d.MemoryMiB < memory) {
			memory = d.MemoryMiB
		}
	}
	if memory > 0 {
		l[nodelabels.LabelMemory] = strconv.FormatUint(memory, 10)
	}
	cc, family := uniform(inv, func(d Device) string { return d.ComputeCapability }),
		uniform(inv, func(d Device) string { return d.Architecture })
	ccMajor, ccMinor, _ := strings.Cut(cc, ".")
	setIf(l, nodelabels.LabelComputeMajor, ccMajor)
	setIf(l, nodelabels.LabelComputeMinor, ccMinor)
	setIf(l, nodelabels.LabelFamily, nodelabels.Value(family))
	dv := strings.SplitN(inv.DriverVersion, ".", 3)
	for i, k := range []string{nodelabels.LabelDriverMajor, nodelabels.LabelDriverMinor, nodelabels.LabelDriverRev} {
		if i < len(dv) {
			setIf(l, k, nodelabels.Value(dv[i]))
		}
	}
	cudaMajor, cudaMinor, _ := strings.Cut(inv.CUDADriverVersion, ".")
	setIf(l, nodelabels.LabelCUDAMajor, nodelabels.Value(cudaMajor))
	setIf(l, nodelabels.LabelCUDAMinor, nodelabels.Value(cudaMinor))
	setIf(l, nodelabels.LabelClique, nodelabels.Value(inv.Clique))
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
	copyAs(nodelabels.LabelCount, "nvidia.com/gpu.count")
	copyAs(nodelabels.LabelMemory, "nvidia.com/gpu.memory")
	copyAs(nodelabels.LabelFamily, "nvidia.com/gpu.family")
	copyAs(nodelabels.LabelComputeMajor, "nvidia.com/gpu.compute.major")
	copyAs(nodelabels.LabelComputeMinor, "nvidia.com/gpu.compute.minor")
	copyAs(nodelabels.LabelDriverMajor, "nvidia.com/cuda.driver.major")
	copyAs(nodelabels.LabelDriverMinor, "nvidia.com/cuda.driver.minor")
	copyAs(nodelabels.LabelDriverRev, "nvidia.com/cuda.driver.rev")
	copyAs(nodelabels.LabelDriverMajor, "nvidia.com/cuda.driver-version.major")
	copyAs(nodelabels.LabelDriverMinor, "nvidia.com/cuda.driver-version.minor")
	copyAs(nodelabels.LabelDriverRev, "nvidia.com/cuda.driver-version.revision")
	copyAs(nodelabels.LabelCUDAMajor, "nvidia.com/cuda.runtime.major")
	copyAs(nodelabels.LabelCUDAMinor, "nvidia.com/cuda.runtime.minor")
	copyAs(nodelabels.LabelCUDAMajor, "nvidia.com/cuda.runtime-version.major")
	copyAs(nodelabels.LabelCUDAMinor, "nvidia.com/cuda.runtime-version.minor")
	copyAs(nodelabels.LabelClique, "nvidia.com/gpu.clique")
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
