package predict

import "warmd.io/warmd/pkg/phases"

// FromRecord adapts one start recorded by pkg/phases on node to a Start. ok is false for starts that
// did not become ready (they say nothing about time-to-ready). phases counts the image pull inside
// its total when the pull was known; Start.Total excludes it, so it is taken out here.
func FromRecord(node string, r phases.Record) (Start, bool) {
	res := r.Result
	if res.Outcome != phases.OutcomeReady || res.TotalSeconds == nil {
		return Start{}, false
	}
	st := Start{
		Model: r.Model, Node: node, SKU: r.GPUSKU, At: res.StartedAt, CompileCache: CacheState(res.CompileCache),
		Phases: make(map[string]float64, len(res.Phases)), Total: *res.TotalSeconds,
	}
	if st.At.IsZero() {
		st.At = r.Recorded
	}
	if st.Model == "" {
		st.Model = res.Model
	}
	for _, p := range res.Phases {
		st.Phases[p.Name] += p.Seconds
	}
	st.Total -= st.Phases[ImagePull]
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
