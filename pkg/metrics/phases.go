package metrics

import "github.com/prometheus/client_golang/prometheus"

// Phases holds vLLM startup measurements.
type Phases struct {
	PhaseSeconds *prometheus.HistogramVec
	Starts       *prometheus.CounterVec
}

func newPhases(reg prometheus.Registerer) *Phases {
	p := &Phases{
		PhaseSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "warmd_vllm_startup_phase_seconds", Help: "Seconds each vLLM startup phase took.",
			Buckets: []float64{1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200},
		}, []string{"phase", "model", "gpu_sku", "compile_cache"}),
		Starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_vllm_starts_total", Help: "vLLM starts seen on this node.",
		}, []string{"outcome", "compile_cache"}),
	}
	reg.MustRegister(p.PhaseSeconds, p.Starts)
	return p
}
