package metrics

import "github.com/prometheus/client_golang/prometheus"

// Prewarm holds page-cache pre-warm metrics. Runs are counted by outcome rather than by model: a
// pre-warm is per pod start, and the interesting signal is how many were cut short (the pod went
// away, or the budget ran out before the last file).
type Prewarm struct {
	// Bytes counts bytes read into the page cache by pre-warms.
	Bytes prometheus.Counter
	// Runs counts pre-warms by event: started, finished, cancelled, failed.
	Runs *prometheus.CounterVec
}

func newPrewarm(reg prometheus.Registerer) *Prewarm {
	p := &Prewarm{
		Bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmd_prewarm_bytes_total", Help: "Bytes of published weights read into the page cache ahead of a vLLM load.",
		}),
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_prewarm_runs_total", Help: "Page-cache pre-warms by event: started, finished, cancelled (pod gone), failed.",
		}, []string{"event"}),
	}
	reg.MustRegister(p.Bytes, p.Runs)
	return p
}
