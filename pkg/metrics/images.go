package metrics

import "github.com/prometheus/client_golang/prometheus"

// Images holds image-prefetch metrics.
type Images struct {
	PullSeconds *prometheus.HistogramVec
	Bytes       prometheus.Counter
	ByState     *prometheus.GaugeVec
	// LayerUnpackSeconds and InflatedBytes are per layer, by decoder (gzip-warmd, gzip-warmd-indexed,
	// zstd, none, or daemon): where an image's unpack time goes, and how much the index path carries.
	LayerUnpackSeconds *prometheus.HistogramVec
	InflatedBytes      *prometheus.CounterVec
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
		LayerUnpackSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "warmd_image_layer_unpack_seconds", Help: "Time to inflate, untar and check one image layer, by decoder.",
			Buckets: prometheus.ExponentialBuckets(0.125, 2, 12),
		}, []string{"decoder"}),
		InflatedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_image_inflated_bytes_total", Help: "Uncompressed layer bytes warmd's own unpacker wrote, by decoder.",
		}, []string{"decoder"}),
	}
	reg.MustRegister(i.PullSeconds, i.Bytes, i.ByState, i.LayerUnpackSeconds, i.InflatedBytes)
	return i
}
