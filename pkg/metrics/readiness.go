package metrics

import "github.com/prometheus/client_golang/prometheus"

// Readiness holds what warmd publishes and predicts.
type Readiness struct {
	NodeWrites     *prometheus.CounterVec
	PredictedReady *prometheus.GaugeVec
	// NodeWarm is 1 while every model this node wants is warm (the warmd.io/warm label).
	NodeWarm prometheus.Gauge
	// ModelState is 1 for each wanted model's current state (the models.warmd.io/<model> label).
	ModelState *prometheus.GaugeVec
}

func newReadiness(reg prometheus.Registerer) *Readiness {
	r := &Readiness{
		NodeWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_node_writes_total", Help: "Writes to this node's Node object, by result.",
		}, []string{"result"}),
		PredictedReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmd_predicted_ready_seconds", Help: "Predicted seconds from pod start to ready, per model.",
		}, []string{"model"}),
		NodeWarm: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "warmd_node_warm", Help: "1 when every model this node wants is warm, else 0.",
		}),
		ModelState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmd_model_state", Help: "1 for the current warm state (cold, image, weights, warm, failed) of each model this node wants.",
		}, []string{"model", "state"}),
	}
	reg.MustRegister(r.NodeWrites, r.PredictedReady, r.NodeWarm, r.ModelState)
	return r
}

// Observe sets the warm gauges from one evaluation; models no longer wanted lose their series.
func (r *Readiness) Observe(warm bool, states map[string]string) {
	if warm {
		r.NodeWarm.Set(1)
	} else {
		r.NodeWarm.Set(0)
	}
	r.ModelState.Reset()
	for model, state := range states {
		r.ModelState.WithLabelValues(model, state).Set(1)
	}
}
