package metrics

import "github.com/prometheus/client_golang/prometheus"

// Readiness holds what warmd publishes and predicts.
type Readiness struct {
	NodeWrites     *prometheus.CounterVec
	PredictedReady *prometheus.GaugeVec
}

func newReadiness(reg prometheus.Registerer) *Readiness {
	r := &Readiness{
		NodeWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_node_writes_total", Help: "Writes to this node's Node object, by result.",
		}, []string{"result"}),
		PredictedReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmd_predicted_ready_seconds", Help: "Predicted seconds from pod start to ready, per model.",
		}, []string{"model"}),
	}
	reg.MustRegister(r.NodeWrites, r.PredictedReady)
	return r
}
