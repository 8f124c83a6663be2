package metrics

import "github.com/prometheus/client_golang/prometheus"

// GPU holds GPU identity metrics.
type GPU struct {
	// Info is 1 for the node's current SKU; dashboards join on it.
	Info *prometheus.GaugeVec
	// Count is the number of GPUs NVML reports (0 on CPU nodes and when NVML is absent).
	Count prometheus.Gauge
}

func newGPU(reg prometheus.Registerer) *GPU {
	g := &GPU{
		Info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmd_gpu_info", Help: "Always 1; labels identify the node's GPU SKU.",
		}, []string{"sku", "product", "driver"}),
		// Not warmd_gpu_count: a _count suffix belongs to a histogram's or summary's series
		// (promtool check metrics flags it).
		Count: prometheus.NewGauge(prometheus.GaugeOpts{Name: "warmd_gpus", Help: "GPUs on the node (0 on CPU nodes and without NVML)."}),
	}
	reg.MustRegister(g.Info, g.Count)
	return g
}
