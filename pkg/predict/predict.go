// Package predict owns the prediction of how long a new vLLM replica of a model would take to become
// ready on a node: the sum of the startup phases that are still needed there, each estimated from the
// starts this node and its GPU SKU have already seen (median of recent starts of the same model and
// compile-cache state), from size ÷ measured throughput for an image pull or weights download that is
// not local yet, and from documented defaults (defaults.go) when there is no history. Every estimate
// says where it came from, so a person can tell a measured figure from a guess.
//
// It also owns the wire form of predictions on the Node: the warmd.io/predicted-ready annotation
// (Annotation, ParseAnnotation), read by the scheduler extender and `warmd status --cluster`.
//
// It does not measure starts (pkg/phases does), decide what is on disk (pkg/readiness does) or write
// the Node (the readiness writer does). Its inputs are small values defined here, so the daemon adapts
// the other parts' records to them and this package stays pure and testable.
package predict

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"warmd.io/warmd/pkg/phases"
)

// Other is the one phase predict adds to pkg/phases' names (phases.Phase*; ImagePull is measured
// from the kubelet's Pulled event before the process starts): the part of a start's total that no
// measured phase covers, so the phases of a prediction add up to a whole start.
const Other = "other"

// Order lists the predicted phases in start order.
var Order = []string{
	phases.PhaseImagePull, phases.PhaseImports, phases.PhaseEngineStart, phases.PhaseWeightsDownload,
	phases.PhaseWeightLoad, phases.PhaseTorchCompile, phases.PhaseKVCacheAndWarmup, phases.PhaseGraphCapture,
	phases.PhaseServerUp, phases.PhaseFirstHealth, Other,
}

// inProcess are the phases inside the vLLM process, whose sum plus Other is the start's Total.
var inProcess = []string{
	phases.PhaseImports, phases.PhaseEngineStart, phases.PhaseWeightsDownload, phases.PhaseWeightLoad,
	phases.PhaseTorchCompile, phases.PhaseKVCacheAndWarmup, phases.PhaseGraphCapture, phases.PhaseServerUp,
	phases.PhaseFirstHealth,
}

// cacheSensitive phases depend on the compile-cache outcome: history of another outcome is never used
// for them (a miss compiles for a minute, a hit loads in seconds).
var cacheSensitive = map[string]bool{
	phases.PhaseTorchCompile: true, phases.PhaseKVCacheAndWarmup: true, phases.PhaseGraphCapture: true, Other: true,
}

// modelIndependent phases cost about the same whatever the model, so the SKU's starts of other models
// are a better estimate than a default.
var modelIndependent = map[string]bool{
	phases.PhaseImports: true, phases.PhaseEngineStart: true, phases.PhaseServerUp: true, phases.PhaseFirstHealth: true,
}

// Start is one vLLM start that became ready, as pkg/phases recorded it. The daemon adapts phases'
// records to this type; starts that did not become ready (Total 0) are ignored.
type Start struct {
	Model        string              `json:"model"`
	Node         string              `json:"node"`
	SKU          string              `json:"sku"`
	At           time.Time           `json:"at"`
	CompileCache phases.CompileCache `json:"compileCache"`
	// Phases holds seconds per phase name. An absent in-process phase did not happen or was not
	// timed (its time is then inside Other). ImagePull and WeightsDownload are absent or 0 when the
	// image or weights were already local.
	Phases map[string]float64 `json:"phases"`
	// Total is process start → ready in seconds (phases' total_seconds), without the image pull.
	Total float64 `json:"total"`
}

// value returns the start's seconds for a phase; Other is what the in-process phases leave of Total.
func (s *Start) value(phase string) float64 {
	if phase != Other {
		return s.Phases[phase]
	}
	rest := s.Total
	for _, p := range inProcess {
		rest -= s.Phases[p]
	}
	return max(rest, 0)
}

// Situation is what a node has for a model right now: what a new replica would still have to do.
type Situation struct {
	Model string
	Node  string
	SKU   string
	// ImageLocal is true when the image is pulled (and pinned); ImageBytes is its size, 0 if unknown.
	ImageLocal bool
	ImageBytes int64
	// WeightsLocal is true when verified weights are on disk; WeightsBytes is their size, 0 if unknown.
	WeightsLocal bool
	WeightsBytes int64
	// Cache is the expected compile-cache outcome: hit when a verified cache for this SKU is on disk,
	// miss when not, disabled when the model runs eager or compile caching is off.
	Cache phases.CompileCache
	// CacheReason says why Cache is what it is when the compile-cache key check decided it (a vLLM pod
	// bound here that has not started: "differs from the node's cached starts in: tensorParallelSize").
	CacheReason string
}

// Throughput is what this node measured for pulls and downloads, in bytes per second (0: none yet).
// MedianRate turns the bytes and seconds in the images/weights status sections into these.
type Throughput struct {
	ImageBytesPerSecond   float64
	WeightsBytesPerSecond float64
}

// Transfer is one finished pull or download: its bytes and wall-clock seconds.
type Transfer struct {
	Bytes   int64
	Seconds float64
}

// MedianRate is the median bytes per second over transfers (tiny ones, under 1 MiB or 10 ms, say
// nothing about the link and are skipped); 0 when none qualifies.
func MedianRate(ts []Transfer) float64 {
	var rates []float64
	for _, t := range ts {
		if t.Bytes >= 1<<20 && t.Seconds >= 0.01 {
			rates = append(rates, float64(t.Bytes)/t.Seconds)
		}
	}
	return median(rates)
}

// Source says where an estimate came from.
type Source string

// Sources of an estimate.
const (
	SourceLocal      Source = "local"      // not needed: already on the node
	SourceHistory    Source = "history"    // median of recorded starts
	SourceThroughput Source = "throughput" // size ÷ measured throughput
	SourceDefault    Source = "default"    // documented default (defaults.go)
)

// Scopes of history, from the most to the least specific.
const (
	ScopeNode        = "node"          // this node, same model and cache state
	ScopeSKU         = "sku"           // any node of this SKU, same model and cache state
	ScopeSKUAnyCache = "sku-any-cache" // same SKU and model, any cache state (cache-insensitive phases)
	ScopeSKUAnyModel = "sku-any-model" // same SKU, any model (model-independent phases)
)

// Estimate is one phase of a prediction and its provenance.
type Estimate struct {
	Phase   string  `json:"phase"`
	Seconds float64 `json:"seconds"`
	Source  Source  `json:"source"`
	// Scope and N describe history: which starts and how many were used.
	Scope string `json:"scope,omitempty"`
	N     int    `json:"n,omitempty"`
}

// String is the short provenance a person reads: "history n=5 (node)", "throughput", "default".
func (e Estimate) String() string {
	if e.Source == SourceHistory {
		return fmt.Sprintf("history n=%d (%s)", e.N, e.Scope)
	}
	return string(e.Source)
}

// Prediction is the predicted time-to-ready of one model on one node, with its breakdown.
type Prediction struct {
	Model string `json:"model"`
	// Seconds is the sum of the phases: pod start → ready, image pull included.
	Seconds float64             `json:"seconds"`
	Cache   phases.CompileCache `json:"compileCache"`
	// CacheReason is Situation.CacheReason: why the key check expects this outcome.
	CacheReason string `json:"compileCacheReason,omitempty"`
	// Phases lists every phase still needed (local ones with 0 seconds), in Order.
	Phases []Estimate `json:"phases"`
}

// Predictor estimates time-to-ready from a history of starts.
type Predictor struct {
	// History is every recorded start this node knows (its own and, when shared, its SKU peers').
	History []Start
	// Recent is how many of the most recent matching starts a median uses (0: DefaultRecent).
	Recent int
	// MinNode is how many starts this node needs before its own history wins over its SKU's
	// (0: DefaultMinNode): one odd start on this node should not outvote ten on its peers.
	MinNode int
	// Defaults are used when there is no history (zero value: Defaults()).
	Defaults *DefaultTable
}

// Defaults for Predictor's knobs.
const (
	DefaultRecent  = 10
	DefaultMinNode = 2
)

// Predict estimates the time-to-ready of s.Model on s.Node with throughput tp.
func (p *Predictor) Predict(s Situation, tp Throughput) Prediction {
	cache := s.Cache
	if cache == "" || cache == phases.CacheUnknown {
		cache = phases.CacheMiss // without a verified cache the start compiles
	}
	pred := Prediction{Model: s.Model, Cache: cache, CacheReason: s.CacheReason}
	for _, phase := range Order {
		e := p.estimate(phase, s, cache, tp)
		pred.Phases = append(pred.Phases, e)
		pred.Seconds += e.Seconds
	}
	return pred
}

func (p *Predictor) estimate(phase string, s Situation, cache phases.CompileCache, tp Throughput) Estimate {
	e := Estimate{Phase: phase}
	switch phase {
	case phases.PhaseImagePull, phases.PhaseWeightsDownload:
		local, bytes, rate := s.ImageLocal, s.ImageBytes, tp.ImageBytesPerSecond
		if phase == phases.PhaseWeightsDownload {
			local, bytes, rate = s.WeightsLocal, s.WeightsBytes, tp.WeightsBytesPerSecond
		}
		if local {
			e.Source = SourceLocal
			return e
		}
		// Only starts that did transfer say how long a transfer takes.
		if v, n, scope := p.history(phase, s, cache, func(v float64) bool { return v > 0 }); n > 0 {
			e.Seconds, e.Source, e.N, e.Scope = v, SourceHistory, n, scope
			return e
		}
		if bytes > 0 && rate > 0 {
			e.Seconds, e.Source = float64(bytes)/rate, SourceThroughput
			return e
		}
		e.Seconds, e.Source = p.defaults().transfer(phase, bytes), SourceDefault
		return e
	}
	if v, n, scope := p.history(phase, s, cache, nil); n > 0 {
		e.Seconds, e.Source, e.N, e.Scope = v, SourceHistory, n, scope
		return e
	}
	e.Seconds, e.Source = p.defaults().phase(phase, cache, s.WeightsBytes), SourceDefault
	return e
}

// history returns the median of the most recent matching starts' values for phase, trying the scopes
// from the most specific; keep filters the values (nil keeps all).
func (p *Predictor) history(phase string, s Situation, cache phases.CompileCache, keep func(float64) bool) (float64, int, string) {
	type scope struct {
		name  string
		match func(*Start) bool
		min   int
	}
	sameCache := func(st *Start) bool { return st.CompileCache == cache }
	scopes := []scope{
		{ScopeNode, func(st *Start) bool {
			return st.Node == s.Node && st.SKU == s.SKU && st.Model == s.Model && sameCache(st)
		}, p.minNode()},
		{ScopeSKU, func(st *Start) bool { return st.SKU == s.SKU && st.Model == s.Model && sameCache(st) }, 1},
	}
	if !cacheSensitive[phase] {
		scopes = append(scopes, scope{ScopeSKUAnyCache, func(st *Start) bool { return st.SKU == s.SKU && st.Model == s.Model }, 1})
	}
	if modelIndependent[phase] {
		scopes = append(scopes, scope{ScopeSKUAnyModel, func(st *Start) bool { return st.SKU == s.SKU }, 1})
	}
	for _, sc := range scopes {
		var picked []*Start
		for i := range p.History {
			st := &p.History[i]
			if st.Total <= 0 || !sc.match(st) {
				continue
			}
			if keep != nil && !keep(st.value(phase)) {
				continue
			}
			picked = append(picked, st)
		}
		if len(picked) < sc.min || len(picked) == 0 {
			continue
		}
		sort.SliceStable(picked, func(i, j int) bool { return picked[i].At.After(picked[j].At) })
		if r := p.recent(); len(picked) > r {
			picked = picked[:r]
		}
		vals := make([]float64, len(picked))
		for i, st := range picked {
			vals[i] = st.value(phase)
		}
		return median(vals), len(vals), sc.name
	}
	return 0, 0, ""
}

func (p *Predictor) recent() int {
	if p.Recent > 0 {
		return p.Recent
	}
	return DefaultRecent
}

func (p *Predictor) minNode() int {
	if p.MinNode > 0 {
		return p.MinNode
	}
	return DefaultMinNode
}

func (p *Predictor) defaults() *DefaultTable {
	if p.Defaults != nil {
		return p.Defaults
	}
	return Defaults()
}

// median of vals (0 for none); vals is not modified.
func median(vals []float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	v := slices.Clone(vals)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
