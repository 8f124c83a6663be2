// Package compilekey predicts, before a vLLM container starts, whether its torch.compile cache will hit
// on this node. vLLM keys its compile cache (torch_compile_cache/<hash10>) on the vLLM version, the
// model config (model path string, revision, dtype, quantization, max model len), the parallel config
// (TP/PP/DP), the compilation config, the VLLM_* env it hashes, the traced code and the compiler (torch,
// Triton, CUDA, GPU name), as vllm/compilation/backends.py computes it. warmd cannot compute
// that hash, but it can see most of its inputs: the image (which fixes vLLM, torch, Triton and the
// traced code), the node's GPU, the args and the env of the pod spec. Inputs holds those; Compare
// matches a pod about to start against the starts that produced the node's cached graphs.
//
// The package is pure: no I/O, no clock. It never predicts a hit from inputs it does not know.
package compilekey

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Default marks an argument the source knew was not set (vLLM's default applies), as opposed to ""
// (the source does not say).
const Default = "default"

// Inputs are the inputs of vLLM's compile-cache key that warmd can see. "" (and 0 for the sizes)
// means unknown; Default means known to be unset.
type Inputs struct {
	// ImageDigest is the image's content digest ("sha256:…"): from the container status once pulled,
	// or from an image reference pinned by digest. It fixes vLLM, torch, Triton and the traced code.
	ImageDigest string `json:"imageDigest,omitempty"`
	// Image is the image reference as the pod spec wrote it.
	Image string `json:"image,omitempty"`
	// VLLMVersion is what the log printed (unknown before the start; the digest implies it).
	VLLMVersion string `json:"vllmVersion,omitempty"`
	// GPU is the node's GPU SKU (the GPU name enters the key through Inductor's system info).
	GPU string `json:"gpu,omitempty"`
	// Model is --model (or `vllm serve <model>`) as written: vLLM hashes the string, a path included.
	Model             string `json:"model,omitempty"`
	Revision          string `json:"revision,omitempty"`
	DType             string `json:"dtype,omitempty"`
	Quantization      string `json:"quantization,omitempty"`
	MaxModelLen       string `json:"maxModelLen,omitempty"`
	CompilationConfig string `json:"compilationConfig,omitempty"`
	// TP, PP and DP are the parallel sizes (1 when the args leave them unset, 0 unknown).
	TP int `json:"tp,omitempty"`
	PP int `json:"pp,omitempty"`
	DP int `json:"dp,omitempty"`
	// Env maps each VLLM_*/TORCH* variable of the pod spec to a fingerprint of its value (never the
	// value: env values can be secrets). EnvKnown says Env is complete (a pod spec without envFrom);
	// without it the env is unknown.
	// Extra holds the other keyed args that were set (kv_cache_dtype, max_num_seqs, speculative_config,
	// enable_lora, …; names as vLLM's args dests), ExtraKnown that the args were complete (a command
	// line without --config, a logged args line), so an arg absent from Extra is vLLM's default.
	Extra      map[string]string `json:"extra,omitempty"`
	ExtraKnown bool              `json:"extraKnown,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	EnvKnown   bool              `json:"envKnown,omitempty"`
	// CacheHash is the <hash10> the start's log printed (recorded starts only).
	CacheHash string `json:"cacheHash,omitempty"`
}

// Input names, as Verdict.Differs and Verdict.Unknown spell them (an env variable is "env:NAME", another
// keyed arg "arg:dest").
const (
	InImage             = "image"
	InVLLMVersion       = "vllmVersion"
	InGPU               = "gpu"
	InModel             = "model"
	InRevision          = "revision"
	InDType             = "dtype"
	InQuantization      = "quantization"
	InMaxModelLen       = "maxModelLen"
	InCompilationConfig = "compilationConfig"
	InTP                = "tensorParallelSize"
	InPP                = "pipelineParallelSize"
	InDP                = "dataParallelSize"
	InEnv               = "env"
	InArgs              = "arg" // another keyed arg: "arg:kv_cache_dtype"
)

// Outcome is the prediction for one start.
type Outcome string

// Outcomes of Compare.
const (
	Hit     Outcome = "hit"     // a cached start had the same inputs, all known
	Miss    Outcome = "miss"    // every cached start differs in at least one known input
	Unknown Outcome = "unknown" // no cached start, or the inputs that would decide are unknown
)

// Verdict is Compare's answer.
type Verdict struct {
	Outcome Outcome `json:"outcome"`
	// Differs names the inputs that differ from the closest cached start (a miss).
	Differs []string `json:"differs,omitempty"`
	// Unknown names the inputs that could not be compared (why an outcome is unknown).
	Unknown []string `json:"unknown,omitempty"`
	// Match is the index in cached of the start that decided (the one matched, or the closest one);
	// -1 when there was none.
	Match int `json:"-"`
}

// Reason is a short human text for an Event or a status line: input names only, never values.
func (v Verdict) Reason() string {
	switch v.Outcome {
	case Hit:
		return "same compile-cache inputs as a start that left its graphs on this node"
	case Miss:
		return "differs from the node's cached starts in: " + strings.Join(v.Differs, ", ")
	}
	if len(v.Unknown) == 0 {
		return "no recorded start with a compile cache on this node"
	}
	return "cannot tell, unknown inputs: " + strings.Join(v.Unknown, ", ")
}

// Compare predicts the compile-cache outcome of want against the starts whose graphs the node holds.
// Hit needs one cached start equal in every input, each known on both sides; Miss needs every cached
// start to differ in at least one input known on both sides; anything else is Unknown.
func Compare(want Inputs, cached []Inputs) Verdict {
	v := Verdict{Outcome: Unknown, Match: -1}
	if len(cached) == 0 {
		return v
	}
	best, bestDiff := -1, 0
	var unknownAll []string
	allDiffer := true
	for i, c := range cached {
		differs, unknown := diff(want, c)
		if len(differs) == 0 && len(unknown) == 0 {
			return Verdict{Outcome: Hit, Match: i}
		}
		if len(differs) == 0 {
			allDiffer = false
			unknownAll = append(unknownAll, unknown...)
			continue
		}
		if best < 0 || len(differs) < bestDiff {
			best, bestDiff = i, len(differs)
			v.Differs = differs
		}
	}
	if allDiffer {
		v.Outcome, v.Match = Miss, best
		return v
	}
	slices.Sort(unknownAll)
	return Verdict{Outcome: Unknown, Unknown: slices.Compact(unknownAll), Match: -1}
}

// diff lists the inputs that differ between a and b (known on both sides) and those that cannot be
// compared.
func diff(a, b Inputs) (differs, unknown []string) {
	cmp := func(name, x, y string) {
		switch {
		case x == "" || y == "":
			unknown = append(unknown, name)
		case x != y:
			differs = append(differs, name)
		}
	}
	sameImage := false
	switch {
	case a.ImageDigest != "" && b.ImageDigest != "":
		sameImage = a.ImageDigest == b.ImageDigest
		if !sameImage {
			differs = append(differs, InImage)
		}
	case a.Image != "" && b.Image != "" && a.Image != b.Image:
		// A different image name: taken as different content (a miss is the safe side to err on).
		differs = append(differs, InImage)
	default:
		unknown = append(unknown, InImage) // one tag can name new content: only a digest proves the same image
	}
	if !sameImage || (a.VLLMVersion != "" && b.VLLMVersion != "") {
		cmp(InVLLMVersion, a.VLLMVersion, b.VLLMVersion) // the digest fixes the version when equal
	}
	cmp(InGPU, a.GPU, b.GPU)
	cmp(InModel, a.Model, b.Model)
	cmp(InRevision, a.Revision, b.Revision)
	cmp(InDType, a.DType, b.DType)
	cmp(InQuantization, a.Quantization, b.Quantization)
	cmp(InMaxModelLen, a.MaxModelLen, b.MaxModelLen)
	cmp(InCompilationConfig, a.CompilationConfig, b.CompilationConfig)
	size := func(n int) string {
		if n <= 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	cmp(InTP, size(a.TP), size(b.TP))
	cmp(InPP, size(a.PP), size(b.PP))
	cmp(InDP, size(a.DP), size(b.DP))
	if !a.ExtraKnown || !b.ExtraKnown {
		unknown = append(unknown, InArgs)
	} else {
		for _, n := range unionKeys(a.Extra, b.Extra) {
			if a.Extra[n] != b.Extra[n] {
				differs = append(differs, InArgs+":"+n)
			}
		}
	}
	if !a.EnvKnown || !b.EnvKnown {
		unknown = append(unknown, InEnv)
	} else {
		for _, n := range unionKeys(a.Env, b.Env) {
			if a.Env[n] != b.Env[n] {
				differs = append(differs, InEnv+":"+n)
			}
		}
	}
	return differs, unknown
}

// unionKeys returns the keys of a and b, sorted.
func unionKeys(a, b map[string]string) []string {
	names := slices.Sorted(maps.Keys(a))
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// KeyedEnv says whether an env variable can enter the compile-cache key: VLLM_* and TORCH*, less
// the ones vLLM leaves out of its hash (ports, addresses, logging, credentials; envs.py ignore list).
func KeyedEnv(name string) bool {
	if !strings.HasPrefix(name, "VLLM_") && !strings.HasPrefix(name, "TORCH") {
		return false
	}
	switch name {
	case "VLLM_PORT", "VLLM_HOST_IP", "VLLM_API_KEY", "VLLM_CONFIGURE_LOGGING", "VLLM_RPC_BASE_PATH":
		return false
	}
	return !strings.HasPrefix(name, "VLLM_LOGGING_")
}

// Fingerprint is what Inputs keeps of an env value: enough to tell two values apart, not to read one.
func Fingerprint(value string) string {
	s := sha256.Sum256([]byte("warmd-compilekey\x00" + value))
	return hex.EncodeToString(s[:6])
}
