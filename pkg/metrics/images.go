package metrics

import "github.com/prometheus/client_golang/prometheus"

// Images holds image-prefetch metrics.
type Images struct {
	PullSeconds *prometheus.HistogramVec
	Bytes       prometheus.Counter
	ByState     *prometheus.GaugeVec
}

func newImages(reg prometheus.Registerer) *Images {
	i := &Images{
		PullSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "warmd_image_pull_seconds", Help: "Time to pull, unpack and pin one image.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}, []string{"result"}),
		Bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmd_image_bytes_total", Help: "Image content bytes fetched.",
		}),
		ByState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmd_images", Help: "Images warmd manages, by state.",
		}, []string{"state"}),
	}
	reg.MustRegister(i.PullSeconds, i.Bytes, i.ByState)
	return i
}
