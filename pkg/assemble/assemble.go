// Package assemble builds the parts `warmd run` runs, in one place and in data-flow order: the API
// client once → the Node watcher → gpu → images, weights → compile cache → page-cache pre-warm →
// phases → compile-cache key check → readiness. Every part is built the same way, New(Deps, Options);
// what they share travels in daemon.Deps (config, logger, store, metrics, API client, Node view), and
// what one part learns reaches the next through the state store, never through a variable filled
// later. Read this file top to bottom to see what feeds what.
//
// It owns the wiring only: what each part does is its package's, the lifecycle is pkg/daemon's.
package assemble

import (
	"fmt"
	"slices"

	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/compilekey/check"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/nodewatch"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/nvml/gonvml"
	"warmd.io/warmd/pkg/peer/serve"
	"warmd.io/warmd/pkg/phases/follow"
	followkube "warmd.io/warmd/pkg/phases/follow/kube"
	"warmd.io/warmd/pkg/podwatch"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images"
	"warmd.io/warmd/pkg/prefetch/weights"
	peersrc "warmd.io/warmd/pkg/prefetch/weights/source/peer"
	"warmd.io/warmd/pkg/prewarm"
	"warmd.io/warmd/pkg/readiness"
	"warmd.io/warmd/pkg/readiness/fromstate"
)

// The watches behind daemon.Deps: the Node watcher is a part too (it runs its watch).
var (
	_ daemon.Part     = (*nodewatch.Watcher)(nil)
	_ daemon.NodeView = (*nodewatch.Watcher)(nil)
	_ daemon.PodWatch = (*podwatch.Watcher)(nil)
)

// Parts is the daemon.Assembler of `warmd run`.
func Parts(d daemon.Deps) (daemon.Assembly, error) {
	// 1. One API client, unless readiness.disabled keeps warmd off the API server; and this node's
	// view of its Node object, which decides through nodeSelectors which models it wants.
	node := nodewatch.Off(d.Config.NodeName)
	if !d.Config.Readiness.Disabled {
		kc, err := KubeClient(d.Config.Readiness.Kubeconfig)
		if err != nil {
			return daemon.Assembly{}, err
		}
		node = nodewatch.New(kc, d.Config.NodeName)
		d.Kube, d.Pods = kc, podwatch.New(kc, d.Config.NodeName)
	}
	d.Node = node

	// 2. The GPU: inventory and SKU key, published in the gpu section; the cache and phases key by it.
	gpu := nvml.NewPart(d, nvml.PartOptions{Detector: nvml.DetectorFromEnv(gonvml.New())})
	sku := nvml.SKU(d.Store)

	// Which configured model a vLLM start serves, and which models running pods serve now: the phases
	// follower names starts with it, and weights and compile caches never evict what it reports.
	models := follow.NewModels(d.Config, d.Log)

	// 3. Images and weights of the models this node wants (d.Node), kept warm.
	img := images.New(d, images.Options{})
	// With peers.enabled a model's chunks come from warm peers (found from the Node labels) before
	// the origin, which stays the identity every file is verified against.
	wrap := func(cfg *config.NodeConfig, open weights.OpenSource) weights.OpenSource {
		return peersrc.Wrap(open, d.Kube, cfg, d.Metrics.Peers, d.Log)
	}
	wts, err := weights.NewManager(d, weights.ManagerOptions{InUse: models.InUse, WrapOpen: wrap})
	if err != nil {
		return daemon.Assembly{}, err
	}

	// 3b. The peer server: what the weights part reports verified and published and the layers of
	// the images the images part pulled and pinned, served to other warmd pods with
	// TokenReview-checked tokens (with peers.enabled off it listens on nothing).
	ps, err := serve.NewPart(d, serve.PartOptions{Published: prefetch.PublishedIn(d.Store), Staged: prefetch.StagedIn(d.Store),
		Pieces: servedPieces(prefetch.PiecesIn(d.Store)), OpenBundles: cache.OpenKept, ImageLayers: img})
	if err != nil {
		return daemon.Assembly{}, err
	}

	// 4. Compile caches of the node's SKU; it reads recorded starts from the phases section itself.
	cc, err := cache.NewPart(d, cache.PartOptions{SKU: sku, Running: models.Running,
		RestoreInterval: d.Config.CompileCache.RestoreInterval.Duration})
	if err != nil {
		return daemon.Assembly{}, err
	}

	// 5. Page-cache pre-warm: a vLLM pod bound here gets its model's published weights read into
	// memory while its container starts (nil without an API server; with prewarm.disabled it
	// exists in the state "disabled", so a reload can turn it on).
	pw, err := prewarm.New(d, prewarm.Options{})
	if err != nil {
		return daemon.Assembly{}, err
	}

	// 6. Startup phases from pod logs; with an API server also each container's image and pull.
	po := follow.PartOptions{SKU: sku, Models: models}
	if d.Kube != nil {
		po.Container = (&followkube.Source{Client: d.Kube}).Lookup
	}
	ph, err := follow.NewPart(d, po)
	if err != nil {
		return daemon.Assembly{}, err
	}

	// 7. Compile-cache key check: the inputs of the starts phases recorded, compared with each vLLM pod
	// bound here before it starts; the verdict feeds readiness's prediction (nil without an API
	// server; with compileCache.disabled in the state "disabled").
	kc, err := check.New(d, check.Options{SKU: sku})
	if err != nil {
		return daemon.Assembly{}, err
	}

	parts := []daemon.Part{node, gpu, img, wts}
	parts = append(parts, ps) // with peers.enabled off too, in the state "disabled"
	parts = append(parts, cc) // with compileCache.disabled too, in the state "disabled"
	if pw != nil {
		parts = append(parts, pw)
	}
	parts = append(parts, ph)
	if kc != nil {
		parts = append(parts, kc)
	}

	// 8. Readiness: every section above → warm state → the Node's labels, condition and predictions;
	// its first write waits for the first pass of the parts above.
	rd, err := readiness.New(d, readiness.Options{Input: fromstate.Input, Upstream: slices.Clone(parts)})
	if err != nil {
		return daemon.Assembly{}, err
	}
	parts = append(parts, rd)
	return daemon.Assembly{Parts: parts, Shared: []daemon.Reconfigurable{models}}, nil
}

// KubeClient builds the one API client from readiness.kubeconfig (in-cluster config when empty):
// `warmd run`'s, and `warmd prefetch images`' when it asks warm peers for layers.
func KubeClient(kubeconfig string) (kube.Interface, error) {
	rc, err := readiness.RESTConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kube.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return cs, nil
}

// servedPieces hands the weights part's partly verified files to the peer server in its own type
// (the peer tree imports nothing of prefetch).
func servedPieces(in func(model, revision string) map[string]prefetch.StagedPieces) func(model, revision string) map[string]serve.Pieces {
	return func(model, revision string) map[string]serve.Pieces {
		ps := in(model, revision)
		if ps == nil {
			return nil
		}
		out := make(map[string]serve.Pieces, len(ps))
		for k, v := range ps {
			out[k] = serve.Pieces(v)
		}
		return out
	}
}
