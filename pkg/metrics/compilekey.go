package metrics

import "github.com/prometheus/client_golang/prometheus"

// CompileKey holds the compile-cache key check's metrics: its predictions against what the starts'
// logs then showed. Labels are the bounded outcome vocabularies, never pods or models.
type CompileKey struct {
	// Checks counts predictions made for pods bound here before they started, by outcome.
	Checks *prometheus.CounterVec
	// Outcomes counts predictions a recorded start resolved, by predicted and observed outcome and
	// whether they agree (agree, disagree, undecided: the prediction or the log said neither hit nor miss).
	Outcomes *prometheus.CounterVec
}

func newCompileKey(reg prometheus.Registerer) *CompileKey {
	c := &CompileKey{
		Checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_compile_cache_checks_total", Help: "Compile-cache predictions for vLLM pods bound to this node before they started, by outcome (hit, miss, unknown).",
		}, []string{"predicted"}),
		Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_compile_cache_check_outcomes_total", Help: "Compile-cache predictions checked against the start's log: predicted and observed outcome, and agreement (agree, disagree, undecided).",
		}, []string{"predicted", "observed", "agreement"}),
	}
	reg.MustRegister(c.Checks, c.Outcomes)
	return c
}
