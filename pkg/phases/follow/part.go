package follow

import (
	"path/filepath"

	"warmd.io/warmd/pkg/daemon"
)

var _ daemon.Part = (*Follower)(nil)

// Part returns the daemon part factory. sku, model and container are injected by the wiring (pkg/nvml
// knows the SKU, the config knows the model names, pkg/phases/follow/kube.Source.Lookup knows pods
// when an API server is configured); any may be nil.
func Part(sku func() string, model ModelFunc, container ContainerInfoFunc) daemon.PartFactory {
	return func(d daemon.Deps) (daemon.Part, error) {
		c := d.Config
		o := Options{
			Dir: c.Phases.PodLogDir, StateDir: filepath.Join(c.DataDir, "state"), Keep: c.Phases.Keep,
			SKU: sku, Model: model, Container: container, Store: d.Store,
		}
		if d.Metrics != nil {
			o.Metrics = d.Metrics.Phases
		}
		if d.Log != nil {
			o.Log = d.Log.With("part", "phases")
		}
		return New(o)
	}
}
