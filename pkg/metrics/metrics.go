// Package metrics owns every Prometheus collector warmd exports. Collectors are registered on a
// Registerer that is passed in (never the global one), so tests build a fresh registry each time.
// Names follow warmd_<thing>_<unit>; label values are bounded (model names, SKU keys, phases, states;
// never pod UIDs).
//
// Each capability's collectors live in their own file here; the parts receive only their own group.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics groups the collectors of every part.
type Metrics struct {
	Daemon     *Daemon
	GPU        *GPU
	Images     *Images
	Weights    *Weights
	Cache      *Cache
	Prewarm    *Prewarm
	CompileKey *CompileKey
	Phases     *Phases
	Readiness  *Readiness
	Peers      *Peers
}

// New creates and registers every collector on reg.
func New(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		Daemon:     newDaemon(reg),
		GPU:        newGPU(reg),
		Images:     newImages(reg),
		Weights:    newWeights(reg),
		Cache:      newCache(reg),
		Prewarm:    newPrewarm(reg),
		CompileKey: newCompileKey(reg),
		Phases:     newPhases(reg),
		Readiness:  newReadiness(reg),
		Peers:      newPeers(reg),
	}
}

// NewRegistry returns a registry with the Go runtime and process collectors, as /metrics serves it.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Daemon holds the daemon's own metrics.
type Daemon struct {
	BuildInfo     *prometheus.GaugeVec
	ConfigReloads *prometheus.CounterVec
}

func newDaemon(reg prometheus.Registerer) *Daemon {
	d := &Daemon{
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmd_build_info", Help: "Always 1; the version label says which warmd runs.",
		}, []string{"version"}),
		ConfigReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_config_reloads_total", Help: "Config file reloads by result (applied, rejected).",
		}, []string{"result"}),
	}
	reg.MustRegister(d.BuildInfo, d.ConfigReloads)
	return d
}
