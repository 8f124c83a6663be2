package cache

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// StartReport is what pkg/phases knows about one vLLM start on this node, as far as compile caches
// go. The daemon wiring turns a phases.Result whose CompileCache is hit or miss into one of these
// (Time: StartedAt, Compiled: CompileCache == miss, CacheDir: CompileCacheDir, VLLMVersion); starts
// with the cache disabled or unknown are not reported.
type StartReport struct {
	Time time.Time
	// Compiled is true when the start logged "Compiling a graph …" (torch.compile ran) or built
	// FlashInfer JIT kernels: the cache did not cover this start.
	Compiled bool
	// CacheDir is the torch_compile_cache/<hash> (or torch_aot_compile/<hash>) dir the start used,
	// when the log names it ("Using cache directory: …"); only its last element matters.
	CacheDir string
	// VLLMVersion, when the log shows it.
	VLLMVersion string
}

// StartVerdict is how the manager judged one start.
type StartVerdict struct {
	// Hit: the start did not compile. Miss: it compiled although a restore had run before it.
	Hit, Miss bool
	// Reason explains a miss when the tree's contents tell why.
	Reason string
}

// ReportStart counts a vLLM start as a compile-cache hit or miss. A miss is a start that compiled
// after this node had restored its SKU's bundles: the restore cost download time and bought nothing.
// When the start names its cache hash dir and no restored bundle holds that hash, the reason is that
// the vLLM version, model, config, env or torch/Triton differ from what the bundles were built with
// (vLLM hashes all of these into the dir name; reference §3.1).
func (m *Manager) ReportStart(r StartReport) StartVerdict {
	hash := ""
	if r.CacheDir != "" {
		el := strings.Split(strings.TrimRight(r.CacheDir, "/"), "/")
		hash = cacheHash(el)
		m.markHashUsed(hash, r.Time)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var v StartVerdict
	if !r.Compiled {
		v.Hit = true
		m.stats.Hits++
		return v
	}
	restored := m.stats.LastRestore != nil && !m.stats.LastRestore.After(r.Time)
	var hashes []string
	for _, rec := range m.records {
		if rec.Live() && rec.Origin != OriginCaptured {
			hashes = append(hashes, rec.Manifest.Versions["vllm-cache-hash"]...)
			hashes = append(hashes, rec.Manifest.Versions["vllm-aot-hash"]...)
		}
	}
	if !restored || len(hashes) == 0 {
		return v // nothing was restored for it: a cold start, not a miss
	}
	v.Miss = true
	m.stats.Misses++
	slices.Sort(hashes)
	hashes = slices.Compact(hashes)
	switch {
	case hash != "" && !slices.Contains(hashes, hash):
		v.Reason = fmt.Sprintf("vLLM used cache dir %s but the restored bundles hold %s: the vLLM version, model, "+
			"config (TP/PP/dtype/max-model-len), VLLM_* env or torch/Triton build differ from the pods that built them", hash, strings.Join(hashes, ", "))
	case hash != "":
		v.Reason = fmt.Sprintf("cache dir %s was restored but vLLM compiled anyway: torch/Inductor/Triton rejected the artifacts (different torch build or traced source paths)", hash)
	default:
		v.Reason = "the start compiled although bundles were restored; its log names no cache dir to compare"
	}
	if r.VLLMVersion != "" {
		v.Reason += " (vLLM " + r.VLLMVersion + ")"
	}
	m.stats.LastMiss = v.Reason
	return v
}

// cacheHash picks the <hash> element out of a logged cache dir
// (".../torch_compile_cache/<hash>[/rank_0_0/…]", or ".../torch_aot_compile/<hash>/…").
func cacheHash(el []string) string {
	for i, e := range el {
		if (e == "torch_compile_cache" || e == "torch_aot_compile") && i+1 < len(el) && el[i+1] != "torch_aot_compile" {
			return el[i+1]
		}
	}
	return el[len(el)-1]
}

// markHashUsed marks the bundles holding a vLLM cache hash dir as used at t, wherever under the
// vllm tree (shared root or a per-model root) the dir lives.
func (m *Manager) markHashUsed(hash string, t time.Time) {
	m.mu.Lock()
	var prefixes []string
	for _, r := range m.records {
		if !r.Live() || r.Manifest.Component != ComponentVLLM {
			continue
		}
		if slices.Contains(r.Manifest.Versions["vllm-cache-hash"], hash) || slices.Contains(r.Manifest.Versions["vllm-aot-hash"], hash) {
			for _, e := range r.Manifest.Entries {
				el := strings.Split(e.Path, "/")
				if i := slices.Index(el, hash); i >= 0 {
					prefixes = append(prefixes, ComponentVLLM+"/"+strings.Join(el[:i+1], "/"))
				}
			}
		}
	}
	m.mu.Unlock()
	slices.Sort(prefixes)
	for _, p := range slices.Compact(prefixes) {
		m.MarkUsed(p, t)
	}
}
