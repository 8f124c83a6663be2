package nvml

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The SKU fingerprint keys compile caches (compile-cache/<sku-key>/ and the remote bundles), labels
// the node (warmd.io/gpu.sku) and labels the warmd_gpu_info metric. Two nodes get the same key exactly
// when a compile cache built on one is valid on the other, as far as the node's hardware and driver
// decide it.
//
// What enters the key, and why (from the caches' own key code: vLLM's compile-cache hash over its
// configs and the compiler in vllm/compilation/backends.py, PyTorch Inductor's FX-graph cache key with
// torch's get_system() in torch/_inductor/codecache.py, Triton's kernel cache key in
// triton/compiler/compiler.py):
//
//   - Product name, exactly as NVML reports it (nvmlDeviceGetName, e.g. "NVIDIA H100 80GB HBM3"). vLLM's
//     torch_compile_cache and Inductor's FX/AOTAutograd caches hash torch's get_system() device *name*,
//     so two SKUs with the same SM (H100 SXM vs H100 PCIe, H100 vs H200) never share those caches. The
//     name also carries the memory variant (A100 40GB vs 80GB), so memory size is not added separately.
//   - Compute capability (sm90, sm100): Triton keys on target.arch = major*10+minor, FlashInfer's JIT
//     dir is the SM list of all visible GPUs. It is implied by the name today, but kept explicit so the
//     key stays right for products NVML names identically across steppings.
//   - MIG profiles, when MIG is enabled: torch reports a MIG slice as "<product> MIG <profile>" and a
//     slice has fewer SMs, so caches built on a full GPU and on a slice differ.
//   - CUDA driver version (nvmlSystemGetCudaDriverVersion, "12.8"): the table's CUDA column invalidates
//     every cache; the toolkit torch and ptxas were built with lives in the image (pkg/cache adds the
//     image's identity), and the driver's CUDA version is the node-side bound on which of those can run
//     and on what the driver's PTX JIT produces.
//   - Driver major ("570" of 570.124.06): the table marks the driver "not in key" for vLLM, Inductor,
//     Triton and FlashInfer, which means those caches will NOT notice a driver change themselves. A
//     major driver upgrade changes the PTX JIT and the CUDA driver API; one recompile per major upgrade
//     is cheap next to a wrong restore, so we key on it. Minor and patch releases are left out so a
//     fleet rolling a patch release keeps one cache.
//
// What deliberately does not enter it: GPU UUIDs, serials, PCI bus ids and minor numbers (they differ
// between identical nodes and would give every node its own cache), device order, GPU count (8× and
// 4× H100 nodes compile the same kernels; tensor-parallel size is in vLLM's own hash), memory
// used/free, MIG slice UUIDs and instance ids, and NVLink fabric cluster/clique ids (topology for
// scheduling, not compilation).
//
// A node with several products gets a key built from the set of (product, compute capability, MIG)
// entries, so heterogeneous nodes never share a key with either homogeneous kind.
//
// Form: "<product slug(s)>.<sm list>[.mig-<profiles>].cuda<X.Y>.drv<major>-<8 hex>", lowercase,
// [a-z0-9.-], at most 63 characters, so it is a valid label value and path element. The readable part
// may be truncated to fit; the hash is the first 8 hex digits of SHA-256 over the full canonical text
// (SKUCanonical), so truncation never merges two keys in practice.
const (
	// SKUNone is the key of a node where NVML found no NVIDIA GPU (CPU nodes, CI, no driver). Compile
	// caches must not be captured or restored under it.
	SKUNone = "none"
	// SKUUnknown is the key when GPUs are present but a field that enters the key could not be read.
	// It is deliberately shared by all such nodes and therefore never cacheable.
	SKUUnknown = "unknown"

	skuFormat    = "warmd-sku/v1"
	maxLabelLen  = 63
	skuHashChars = 8
)

// ErrIncomplete says a field the SKU key needs was not read.
var ErrIncomplete = errors.New("GPU identity incomplete")

// Cacheable reports whether compile caches may be keyed by sku: false for SKUNone, SKUUnknown and "".
func Cacheable(sku string) bool {
	return sku != "" && sku != SKUNone && sku != SKUUnknown
}

// SKUKey returns the node's SKU fingerprint for inv: SKUNone when no GPU is present, SKUUnknown when a
// field that enters the key is missing, otherwise the key described above.
func SKUKey(inv Inventory) string {
	if !inv.Present {
		return SKUNone
	}
	canon, err := SKUCanonical(inv)
	if err != nil {
		return SKUUnknown
	}
	sum := sha256.Sum256([]byte(canon))
	hash := hex.EncodeToString(sum[:])[:skuHashChars]
	return readableKey(inv, maxLabelLen-1-skuHashChars) + "-" + hash
}

// gpuEntry is one distinct (product, compute capability, MIG) combination on the node.
type gpuEntry struct {
	product      string
	major, minor int
	mig          []string // nil: MIG off; non-nil (maybe empty): MIG on with these profiles
}

func (e gpuEntry) canonical() string {
	mig := "off"
	if e.mig != nil {
		mig = "[" + strings.Join(e.mig, ",") + "]"
	}
	return fmt.Sprintf("gpu=%s;cc=%d.%d;mig=%s", e.product, e.major, e.minor, mig)
}

// SKUCanonical returns the exact text that is hashed into the SKU key: the format version, driver
// major, CUDA driver version and one sorted line per distinct GPU entry. It fails with ErrIncomplete,
// naming the missing field, when the inventory lacks an input.
func SKUCanonical(inv Inventory) (string, error) {
	drv, err := driverMajor(inv.DriverVersion)
	if err != nil {
		return "", err
	}
	if _, _, err := parseCUDA(inv.CUDADriverVersion); err != nil {
		return "", err
	}
	entries, err := gpuEntries(inv)
	if err != nil {
		return "", err
	}
	lines := []string{skuFormat, "driver-major=" + drv, "cuda=" + inv.CUDADriverVersion}
	for _, e := range entries {
		lines = append(lines, e.canonical())
	}
	return strings.Join(lines, "\n"), nil
}

func gpuEntries(inv Inventory) ([]gpuEntry, error) {
	if inv.DeviceCount == 0 || len(inv.Devices) != inv.DeviceCount {
		return nil, fmt.Errorf("%w: NVML reported %d devices but %d were read", ErrIncomplete, inv.DeviceCount, len(inv.Devices))
	}
	seen := map[string]bool{}
	var out []gpuEntry
	for _, d := range inv.Devices {
		major, minor, ok := d.CC()
		if d.Product == "" || !ok {
			return nil, fmt.Errorf("%w: GPU %d lacks its product name or compute capability", ErrIncomplete, d.Index)
		}
		e := gpuEntry{product: d.Product, major: major, minor: minor}
		if d.MIG != nil && d.MIG.Incomplete {
			return nil, fmt.Errorf("%w: GPU %d's MIG mode or profiles could not be read", ErrIncomplete, d.Index)
		}
		if d.MIG != nil && d.MIG.Enabled {
			e.mig = []string{}
			for _, m := range d.MIG.Devices {
				if m.Profile == "" {
					return nil, fmt.Errorf("%w: GPU %d MIG device %d has no profile", ErrIncomplete, d.Index, m.Index)
				}
				e.mig = append(e.mig, m.Profile)
			}
			slices.Sort(e.mig)
			e.mig = slices.Compact(e.mig)
		}
		if c := e.canonical(); !seen[c] {
			seen[c] = true
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b gpuEntry) int { return strings.Compare(a.canonical(), b.canonical()) })
	return out, nil
}

// readableKey builds the human part of the key within budget characters.
func readableKey(inv Inventory, budget int) string {
	entries, _ := gpuEntries(inv) // SKUCanonical already succeeded
	var products, sms, migs []string
	type sm struct{ major, minor int }
	var smv []sm
	for _, e := range entries {
		products = append(products, slug(e.product))
		smv = append(smv, sm{e.major, e.minor})
		migs = append(migs, e.mig...)
	}
	products = uniq(products)
	slices.SortFunc(smv, func(a, b sm) int { return cmp.Or(cmp.Compare(a.major, b.major), cmp.Compare(a.minor, b.minor)) })
	for _, s := range slices.Compact(smv) {
		sms = append(sms, fmt.Sprintf("sm%d%d", s.major, s.minor))
	}
	drv, _ := driverMajor(inv.DriverVersion)
	tail := ".cuda" + inv.CUDADriverVersion + ".drv" + drv
	core := "." + strings.Join(sms, "-")
	prod := strings.Join(products, "--")
	if len(products) > 1 {
		// Every product name starts with "NVIDIA"; on a mixed node the prefix only costs room.
		prod = strings.Join(mapTrim(products, "nvidia-"), "--")
	}
	mig := ""
	if inv.MIGEnabled() {
		mig = ".mig"
		if ps := uniq(migs); len(ps) > 0 {
			mig += "-" + strings.Join(mapSlug(ps, ""), "-")
		}
	}
	switch {
	case len(prod+core+mig+tail) <= budget:
	case mig != "" && len(prod+core+".mig"+tail) <= budget:
		mig = ".mig" // profiles stay in the hash
	case len(products) > 1:
		prod = "mixed" // the products stay in the hash
	}
	if mig != "" && len(prod+core+mig+tail) > budget {
		mig = ".mig"
	}
	if room := budget - len(core+mig+tail); len(prod) > room {
		prod = trimEnds(prod[:max(room, 0)])
	}
	if prod == "" {
		prod = "gpu"
	}
	out := prod + core + mig + tail
	if len(out) > budget {
		out = trimEnds(out[:budget])
	}
	return out
}

// slug lowercases s and turns every run of characters outside [a-z0-9] into one '-'.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimRight(b.String(), "-")
}

// mapSlug slugs each of in and drops the '-' a '.' became ("1g.10gb" → "1g10gb") when sep is "".
func mapSlug(in []string, sep string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		out = append(out, strings.ReplaceAll(slug(s), "-", sep))
	}
	return out
}

func mapTrim(in []string, prefix string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		out = append(out, strings.TrimPrefix(s, prefix))
	}
	return out
}

func uniq(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// trimEnds removes characters a label value may not start or end with.
func trimEnds(s string) string {
	return strings.Trim(s, "-._")
}

// driverMajor returns "570" for "570.124.06".
func driverMajor(v string) (string, error) {
	major, _, _ := strings.Cut(v, ".")
	if _, err := strconv.Atoi(major); err != nil || major == "" {
		return "", fmt.Errorf("%w: driver version %q has no numeric major", ErrIncomplete, v)
	}
	return major, nil
}

// parseCUDA parses "12.8".
func parseCUDA(v string) (major, minor int, err error) {
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return 0, 0, fmt.Errorf("%w: CUDA driver version %q is not major.minor", ErrIncomplete, v)
	}
	return major, minor, nil
}

// FormatCUDAVersion turns NVML's integer CUDA driver version (12080) into "12.8".
func FormatCUDAVersion(v int) string {
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}
