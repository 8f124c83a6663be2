package main

import (
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/phases/follow"
	"warmd.io/warmd/pkg/phases/follow/kube"
	"warmd.io/warmd/pkg/prefetch/images"
	"warmd.io/warmd/pkg/prefetch/weights"
	"warmd.io/warmd/pkg/prewarm"
	"warmd.io/warmd/pkg/readiness"
	"warmd.io/warmd/pkg/readiness/fromstate"
	"warmd.io/warmd/pkg/state"
)

// parts lists, in start order, the capabilities `warmd run` runs, and wires what they share: one view
// of this node's Node (which models it wants), the GPU SKU from the gpu section, and the readiness
// input built from every part's section.
func parts() []daemon.PartFactory {
	view := &readiness.NodeView{}
	var compileCache *cache.Part
	var running func() []string // one cached view of running pods' models, for both evictions
	runningFor := func(d daemon.Deps) func() []string {
		if running == nil {
			running = runningModels(d)
		}
		return running
	}
	wants := func(m config.Model) bool {
		if ok, known := view.Wants(m); known {
			return ok
		}
		// Until the Node has been read (or while the API server is away) only models without a
		// nodeSelector are known to be wanted; selected ones wait rather than fetch what may be undone.
		ok, err := readiness.ModelWanted(m, nil)
		return ok && err == nil
	}
	return []daemon.PartFactory{
		newGPUPart,
		func(d daemon.Deps) (daemon.Part, error) {
			return images.New(d, images.Options{Wants: wants}), nil
		},
		func(d daemon.Deps) (daemon.Part, error) {
			inUse := runningFor(d)
			return weights.NewManager(weights.ManagerOptions{Deps: d, Wants: wants, InUse: func(model string) bool {
				return slices.Contains(inUse(), model)
			}})
		},
		func(d daemon.Deps) (daemon.Part, error) {
			p, err := newCachePart(d, runningFor(d))
			if p == nil || err != nil {
				return nil, err
			}
			compileCache = p
			return p, nil
		},
		func(d daemon.Deps) (daemon.Part, error) { // page-cache pre-warm of starting vLLM pods' weights
			p, err := prewarm.New(d, prewarm.Options{})
			if p == nil || err != nil {
				return nil, err
			}
			return p, nil
		},
		newPhasesPart,
		func(d daemon.Deps) (daemon.Part, error) { // after both: hits and misses of recorded starts
			if compileCache == nil {
				return nil, nil
			}
			return &cache.StartsBridge{Store: d.Store, Cache: compileCache}, nil
		},
		readiness.NewPartFactory(fromstate.Input, view),
	}
}

// runningModels returns the configured models that vLLM pods on this node serve now, read from the
// kubelet's pod log dir (pkg/phases/follow.RunningModels). Budget eviction of weights and compile caches
// never touches them. Eviction asks once per model and per bundle, so the answer is kept for 10 s
// rather than rereading every pod's log each time.
func runningModels(d daemon.Deps) func() []string {
	name := modelName(d.Config)
	var (
		mu     sync.Mutex
		cached []string
		at     time.Time
	)
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < 10*time.Second {
			return cached
		}
		ms, err := follow.RunningModels(d.Config.Phases.PodLogDir, name, 500)
		if err != nil {
			d.Log.Warn("cannot tell which models running pods use; eviction relies on recent use only", "err", err)
		}
		cached, at = slices.DeleteFunc(ms, func(m string) bool { return m == "unmanaged" }), time.Now()
		return cached
	}
}

// nodeSKU returns the GPU SKU key the gpu part published ("none" without a GPU, "unknown" when NVML
// could not tell), "" before the first detection. The compile-cache part refuses the non-keys itself
// (cache.CheckSKU) and says so in its status.
func nodeSKU(store *state.Store) func() string {
	return func() string {
		st, _ := nvml.FromSnapshot(store.Snapshot())
		return st.Inventory.SKU
	}
}

// newPhasesPart follows vLLM pod logs. With the API server configured it also reads each container's
// image, start time and image pull from the pod and the kubelet's events.
func newPhasesPart(d daemon.Deps) (daemon.Part, error) {
	var lookup follow.ContainerInfoFunc
	if !d.Config.Readiness.Disabled {
		rc, err := readiness.RESTConfig(d.Config.Readiness.Kubeconfig)
		if err != nil {
			return nil, err
		}
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, err
		}
		lookup = (&kube.Source{Client: cs}).Lookup
	}
	return follow.Part(nodeSKU(d.Store), modelName(d.Config), lookup)(d)
}

// modelName maps what a vLLM start printed as its model (an org/name id, a path into the HF cache
// warmd fills, or another path) to a configured model name, so metric labels stay bounded: starts of
// models warmd does not manage are labelled "unmanaged".
func modelName(cfg *config.NodeConfig) follow.ModelFunc {
	names := map[string]string{}
	for _, m := range cfg.Models {
		names[m.Name] = m.Name
		names["models--"+strings.ReplaceAll(m.Name, "/", "--")] = m.Name
		names[filepath.Base(m.Name)] = m.Name
	}
	return func(_, _ string, r phases.Result) string {
		if n, ok := names[r.Model]; ok {
			return n
		}
		for _, part := range strings.Split(filepath.ToSlash(r.Model), "/") {
			if n, ok := names[part]; ok && strings.HasPrefix(part, "models--") {
				return n
			}
		}
		if n, ok := names[filepath.Base(r.Model)]; ok {
			return n
		}
		return "unmanaged"
	}
}
