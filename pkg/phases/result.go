// Package phases owns the measurement of vLLM startups: a pure parser that turns one container's
// log (raw vLLM output, CRI container-log lines, `kubectl logs --timestamps`, journald/syslog or
// collector-prefixed lines) into a Result — version, engine, outcome, compile-cache verdict, the
// numbers vLLM printed itself and the phases measured on the wall clock — plus renderers for people
// (table, SVG waterfall) and tools (JSON). The pod-log follower that runs inside the daemon lives in
// the follow subpackage.
//
// It does not predict anything (readiness does, from Records) and it does no I/O besides reading the
// io.Reader it is handed.
//
// Log formats follow ../shared/reference/vllm-startup-and-caches.md §1–2; one line outside that sheet
// is used: "Time spent downloading weights for %s: %.6f seconds" (vllm model_executor/model_loader/
// weight_utils.py, logged only when the download took more than 0.5 s).
package phases

import (
	"encoding/json"
	"math"
	"time"
)

// Outcome says how a start ended.
type Outcome string

// Outcomes of a start.
const (
	// OutcomeReady: the HTTP server came up ("Application startup complete" or "Starting vLLM … server").
	OutcomeReady Outcome = "ready"
	// OutcomeFailed: the engine or server died before it was ready; Result.Error says why.
	OutcomeFailed Outcome = "failed"
	// OutcomeIncomplete: the log ends before either happened (still starting, or killed from outside).
	OutcomeIncomplete Outcome = "incomplete"
)

// CompileCache is the verdict on vLLM's torch.compile cache for one start.
type CompileCache string

// Compile-cache verdicts.
const (
	CacheHit      CompileCache = "hit"      // compiled graphs were loaded from the cache
	CacheMiss     CompileCache = "miss"     // at least one graph was compiled
	CacheDisabled CompileCache = "disabled" // eager mode, V0 engine without compile, or the cache turned off
	CacheUnknown  CompileCache = "unknown"  // the log does not say (e.g. it stops before compiling)
)

// Phase names, in start order. They follow the seed's table where a row maps.
const (
	PhaseImagePull        = "image_pull" // only when the caller knows the pull (the kubelet's Pulled event)
	PhaseImports          = "imports"
	PhaseEngineStart      = "engine_start"
	PhaseWeightsDownload  = "weights_download"
	PhaseWeightLoad       = "weight_load"
	PhaseTorchCompile     = "torch_compile"
	PhaseKVCacheAndWarmup = "kv_cache_and_warmup"
	PhaseGraphCapture     = "graph_capture"
	PhaseServerUp         = "server_up"
	PhaseFirstHealth      = "first_health_200"
	PhaseTotal            = "total"
)

// PhaseOrder lists every phase name in display order (total last).
var PhaseOrder = []string{
	PhaseImagePull, PhaseImports, PhaseEngineStart, PhaseWeightsDownload, PhaseWeightLoad, PhaseTorchCompile,
	PhaseKVCacheAndWarmup, PhaseGraphCapture, PhaseServerUp, PhaseFirstHealth, PhaseTotal,
}

// Phase is one measured stretch of a start. Start is seconds after the start of the process (the first
// log line unless the caller knows the container start), so a waterfall needs no absolute clock.
type Phase struct {
	Name    string  `json:"name"`
	Start   float64 `json:"start"`
	Seconds float64 `json:"seconds"`
	// pieces are the wall-clock stretches when a phase is interrupted by another (kv_cache_and_warmup
	// around graph capture); the SVG draws them, JSON reports their sum.
	pieces [][2]float64
}

// Reported holds the numbers vLLM printed itself (slowest rank). A nil field means the log did not
// print it; it is never filled from a guess.
type Reported struct {
	WeightsDownloadSeconds *float64 `json:"weights_download_seconds,omitempty"`
	WeightsLoadSeconds     *float64 `json:"weights_load_seconds,omitempty"`
	ModelLoadSeconds       *float64 `json:"model_load_seconds,omitempty"`
	DynamoTransformSeconds *float64 `json:"dynamo_transform_seconds,omitempty"`
	TorchCompileSeconds    *float64 `json:"torch_compile_seconds,omitempty"`
	GraphCaptureSeconds    *float64 `json:"graph_capture_seconds,omitempty"`
	InitEngineSeconds      *float64 `json:"init_engine_seconds,omitempty"`
}

// Result is what one start's log says. Zero values mean "the log does not say"; JSON writes them as null.
type Result struct {
	Source      string
	VLLMVersion string
	Engine      string // "v0" or "v1"
	// TensorParallelSize is what the args or engine config said, 1 when they were printed without it
	// (vLLM's default), 0 when the log shows neither.
	TensorParallelSize int
	Model              string // --model as vLLM printed it
	// Args is the args line as vLLM printed it ("non-default args: {…}" or "args: Namespace(…)"),
	// read by pkg/compilekey for the inputs of the compile-cache key. It is not part of the JSON
	// contract (a record keeps the inputs derived from it instead).
	Args    string
	Outcome Outcome
	// Error is the line that says why a failed start failed: the root cause, not a wrapper that
	// points at it ("Engine core initialization failed. See root cause above", a pydantic
	// ValidationError header, whose detail line is taken instead).
	Error        string
	CompileCache CompileCache
	// CompileCacheDir is the torch.compile cache dir vLLM said it used (rank 0's), and CompileCacheHash
	// its <hash10> (or the AOT sha256) component: pkg/cache compares it with what it restored.
	CompileCacheDir  string
	CompileCacheHash string
	Reported         Reported
	Phases           []Phase // in PhaseOrder, total excluded
	// TotalSeconds is process start (image pull start when known) → ready, or → first /health 200
	// when logged; for a failed start, → the first line that said it failed (the time to failure).
	// nil for an incomplete start or a log without a clock.
	TotalSeconds *float64
	// StartedAt is the absolute time of the process start when the clock has a date (zero otherwise).
	StartedAt time.Time
	// Clock names the timestamps used: cri, kubectl, collector, journald, syslog, vllm (1 s, no year) or none.
	Clock string
}

// Phase returns the named phase's seconds (PhaseTotal included).
func (r *Result) Phase(name string) (float64, bool) {
	if name == PhaseTotal {
		if r.TotalSeconds == nil {
			return 0, false
		}
		return *r.TotalSeconds, true
	}
	for _, p := range r.Phases {
		if p.Name == name {
			return p.Seconds, true
		}
	}
	return 0, false
}

// resultJSON is the contract other tools read (issue 6): keys always present, unknown values null.
type resultJSON struct {
	Source             string       `json:"source"`
	VLLMVersion        *string      `json:"vllm_version"`
	Engine             *string      `json:"engine"`
	TensorParallelSize *int         `json:"tensor_parallel_size"`
	Model              *string      `json:"model"`
	Outcome            Outcome      `json:"outcome"`
	Error              *string      `json:"error"`
	CompileCache       CompileCache `json:"compile_cache"`
	CompileCacheDir    *string      `json:"compile_cache_dir"`
	CompileCacheHash   *string      `json:"compile_cache_hash"`
	Reported           Reported     `json:"reported"`
	Phases             []Phase      `json:"phases"`
	TotalSeconds       *float64     `json:"total_seconds"`
	StartedAt          *time.Time   `json:"started_at"`
	Clock              string       `json:"clock"`
}

// MarshalJSON writes the contract: null for what the log does not say, seconds rounded to the ms.
func (r Result) MarshalJSON() ([]byte, error) {
	j := resultJSON{
		Source: r.Source, VLLMVersion: strPtr(r.VLLMVersion), Engine: strPtr(r.Engine), Model: strPtr(r.Model),
		Outcome: r.Outcome, Error: strPtr(r.Error), CompileCache: r.CompileCache,
		CompileCacheDir: strPtr(r.CompileCacheDir), CompileCacheHash: strPtr(r.CompileCacheHash),
		Reported: r.Reported, Phases: make([]Phase, 0, len(r.Phases)), Clock: r.Clock,
	}
	if r.TensorParallelSize > 0 {
		j.TensorParallelSize = &r.TensorParallelSize
	}
	for _, p := range r.Phases {
		j.Phases = append(j.Phases, Phase{Name: p.Name, Start: round3(p.Start), Seconds: round3(p.Seconds)})
	}
	if r.TotalSeconds != nil {
		t := round3(*r.TotalSeconds)
		j.TotalSeconds = &t
	}
	if !r.StartedAt.IsZero() {
		t := r.StartedAt.UTC()
		j.StartedAt = &t
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON wrote (records kept on disk).
func (r *Result) UnmarshalJSON(b []byte) error {
	var j resultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Result{
		Source: j.Source, VLLMVersion: deref(j.VLLMVersion), Engine: deref(j.Engine), Model: deref(j.Model),
		Outcome: j.Outcome, Error: deref(j.Error), CompileCache: j.CompileCache,
		CompileCacheDir: deref(j.CompileCacheDir), CompileCacheHash: deref(j.CompileCacheHash),
		Reported: j.Reported, Phases: j.Phases, TotalSeconds: j.TotalSeconds, Clock: j.Clock,
	}
	if j.TensorParallelSize != nil {
		r.TensorParallelSize = *j.TensorParallelSize
	}
	if j.StartedAt != nil {
		r.StartedAt = *j.StartedAt
	}
	return nil
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
