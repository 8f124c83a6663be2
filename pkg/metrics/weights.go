package metrics

import "github.com/prometheus/client_golang/prometheus"

// Weights holds weight-prefetch metrics.
type Weights struct {
	Bytes           prometheus.Counter
	DownloadSeconds *prometheus.HistogramVec
	ByState         *prometheus.GaugeVec
}

func newWeights(reg prometheus.Registerer) *Weights {
	w := &Weights{
		Bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmd_weights_bytes_total", Help: "Model weight bytes downloaded.",
		}),
		DownloadSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "warmd_weights_download_seconds", Help: "Time to download, verify and publish one model.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}, []string{"model", "result"}),
		ByState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmd_weights_models", Help: "Models warmd manages, by weights state.",
		}, []string{"state"}),
	}
	reg.MustRegister(w.Bytes, w.DownloadSeconds, w.ByState)
	return w
}
