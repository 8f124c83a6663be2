package metrics

import "github.com/prometheus/client_golang/prometheus"

// Cache holds compile-cache metrics.
type Cache struct {
	Bytes             *prometheus.GaugeVec
	Files             *prometheus.GaugeVec
	Bundles           *prometheus.CounterVec
	Starts            *prometheus.CounterVec
	RestoredButMissed prometheus.Counter
}

func newCache(reg prometheus.Registerer) *Cache {
	c := &Cache{
		Bytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmd_compile_cache_bytes", Help: "Bytes in the node's compile-cache tree, by component.",
		}, []string{"component"}),
		Files: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmd_compile_cache_files", Help: "Files in the node's compile-cache tree, by component.",
		}, []string{"component"}),
		Bundles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_compile_cache_bundles_total", Help: "Bundles captured, uploaded, restored, rejected or evicted.",
		}, []string{"op"}),
		Starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_compile_cache_starts_total",
			Help: "vLLM starts on this node by compile-cache result: hit (no compile) or miss (compiled after a restore).",
		}, []string{"result"}),
		RestoredButMissed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmd_compile_cache_restored_but_missed_total",
			Help: "vLLM starts that compiled again although a cache for their SKU had been restored.",
		}),
	}
	reg.MustRegister(c.Bytes, c.Files, c.Bundles, c.Starts, c.RestoredButMissed)
	return c
}
