package predict

import (
	"time"

	"warmd.io/warmd/pkg/phases"
)

// FromRecord adapts one start recorded by pkg/phases on node to a Start. ok is false for starts that
// did not become ready (they say nothing about time-to-ready). phases counts the image pull inside
// its total when the pull was known; Start.Total excludes it, so it is taken out here.
func FromRecord(node string, r phases.Record) (Start, bool) {
	return FromResult(node, r.GPUSKU, r.Model, r.Recorded, r.Result)
}

// FromResult adapts one parsed start (a log read outside the daemon, e.g. by the evaluation) to a
// Start of model on node and sku; recorded stands in for the start time when the log's clock has no
// date. An empty model takes the one vLLM printed.
func FromResult(node, sku, model string, recorded time.Time, res phases.Result) (Start, bool) {
	if res.Outcome != phases.OutcomeReady || res.TotalSeconds == nil {
		return Start{}, false
	}
	st := Start{
		Model: model, Node: node, SKU: sku, At: res.StartedAt, CompileCache: res.CompileCache,
		Phases: make(map[string]float64, len(res.Phases)), Total: *res.TotalSeconds,
	}
	if st.At.IsZero() {
		st.At = recorded
	}
	if st.Model == "" {
		st.Model = res.Model
	}
	for _, p := range res.Phases {
		st.Phases[p.Name] += p.Seconds
	}
	st.Total -= st.Phases[phases.PhaseImagePull]
	if st.Total <= 0 {
		return Start{}, false
	}
	return st, true
}

// FromRecords adapts every ready record (see FromRecord).
func FromRecords(node string, rs []phases.Record) []Start {
	out := make([]Start, 0, len(rs))
	for _, r := range rs {
		if st, ok := FromRecord(node, r); ok {
			out = append(out, st)
		}
	}
	return out
}
