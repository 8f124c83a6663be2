// Package extender owns warmd's kube-scheduler extender: the HTTP API (/filter, /prioritize with
// k8s.io/kube-scheduler/extender/v1 types, nodeCacheCapable or not) that ranks Nodes for a vLLM pod by
// the predicted time-to-ready warmd's daemons publish on each Node (warmd.io/predicted-ready), and
// optionally filters out Nodes where that model failed (models.warmd.io/<model>=failed). Nodes are read
// through an informer into an Index parsed once per Node version, so a request costs map lookups.
//
// It also owns the parsing of what warmd publishes on a Node (Info, LabelName), which the cluster view
// of `warmd status --cluster` (pkg/status) reads, and the replica signal for autoscalers and routers
// (how long each vLLM pod has been ready, from its Ready condition: ReplicaReadySince, Replicas).
//
// It does not compute predictions (pkg/predict does, on each node) and writes nothing to the
// cluster. Pods that name no model get neutral scores and pass every filter: the extender never blocks
// a pod it knows nothing about.
package extender

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/vllm"
)

// Config is the extender's behaviour.
type Config struct {
	// FilterFailed removes Nodes whose label says the pod's model failed there (reported to the
	// scheduler as unresolvable: preempting pods would not fix it).
	FilterFailed bool
	// MaxBodyBytes bounds a request body (0: DefaultMaxBodyBytes); a larger body is refused with 413.
	MaxBodyBytes int64
	// MaxInFlight bounds the scheduler requests served at once (0: DefaultMaxInFlight); one more is
	// refused with 503 at once, before its body is read.
	MaxInFlight int
	// MaxNodes bounds the candidate Nodes of one request (0: DefaultMaxNodes); more are refused with 413.
	MaxNodes int
}

// Extender answers kube-scheduler extender calls from its Index.
type Extender struct {
	cfg     Config
	index   *Index
	log     *slog.Logger
	metrics *metrics.Extender
	synced  atomic.Bool
	// slots holds one token per request in flight (cap MaxInFlight).
	slots chan struct{}
	// replicas, when set, is kept current from a pod informer (TrackReplicas).
	replicas *Replicas
}

// TrackReplicas makes Run also watch Pods and keep r current: the vLLM replicas per model and how
// long each has been ready (the autoscaler/router signal, see replica.go). Call it before Run.
func (x *Extender) TrackReplicas(r *Replicas) { x.replicas = r }

// New returns an extender over index; m may be nil (no metrics), log nil (discard).
func New(cfg Config, index *Index, m *metrics.Extender, log *slog.Logger) *Extender {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Extender{cfg: cfg, index: index, log: log, metrics: m, slots: make(chan struct{}, cfg.MaxInFlight)}
}

// Run keeps the Index current from a Node informer until ctx ends. Only labels, annotations, the
// resource version, spec.unschedulable and the Ready status are kept (a transform drops the rest),
// so 5,000 Nodes cost little memory.
func (x *Extender) Run(ctx context.Context, cs kube.Interface, resync time.Duration) error {
	inf := kube.NodeInformer(cs, resync, nil)
	if err := inf.SetTransform(slimNode); err != nil {
		return fmt.Errorf("node informer transform: %w", err)
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { x.upsert(o) },
		UpdateFunc: func(_, o any) { x.upsert(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if n, ok := o.(*corev1.Node); ok {
				x.index.Delete(n.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("node informer handler: %w", err)
	}
	infs := []cache.SharedIndexInformer{inf}
	if x.replicas != nil {
		pinf, err := x.podInformer(cs, resync)
		if err != nil {
			return err
		}
		infs = append(infs, pinf)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // the informers have stopped when Run returns
	defer cancel()
	var synced []cache.InformerSynced
	for _, i := range infs {
		wg.Go(func() { i.Run(ctx.Done()) })
		synced = append(synced, i.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("informers did not sync: %w", context.Cause(ctx))
	}
	x.synced.Store(true)
	x.log.Info("informers synced", "nodes", x.index.Len(), "trackReplicas", x.replicas != nil)
	<-ctx.Done()
	return nil
}

func (x *Extender) podInformer(cs kube.Interface, resync time.Duration) (cache.SharedIndexInformer, error) {
	inf := kube.PodInformer(cs, resync, nil)
	if err := inf.SetTransform(slimPod); err != nil {
		return nil, fmt.Errorf("pod informer transform: %w", err)
	}
	upsert := func(o any) {
		if p, ok := o.(*corev1.Pod); ok {
			x.replicas.Upsert(p)
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    upsert,
		UpdateFunc: func(_, o any) { upsert(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				x.replicas.Delete(p.Namespace, p.Name)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("pod informer handler: %w", err)
	}
	return inf, nil
}

func (x *Extender) upsert(o any) {
	if n, ok := o.(*corev1.Node); ok {
		x.index.Upsert(n)
	}
}

func slimNode(o any) (any, error) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return o, nil
	}
	slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels, Annotations: n.Annotations,
	}, Spec: corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable}}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady { // only whether it is Ready (Info reads it), not the heartbeat times
			slim.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slim, nil
}

// Synced reports whether the informer has listed every Node once (readiness of the Deployment).
func (x *Extender) Synced() bool { return x.synced.Load() }

// Handler serves POST /filter, POST /prioritize, GET /healthz and GET /readyz (503 until synced).
func (x *Extender) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /filter", x.serve("filter", func(a *extenderv1.ExtenderArgs) any { return x.Filter(a) }))
	mux.HandleFunc("POST /prioritize", x.serve("prioritize", func(a *extenderv1.ExtenderArgs) any { return x.Prioritize(a) }))
	x.probes(mux)
	return mux
}

// ProbeHandler serves only GET /healthz and GET /readyz, for the plain-HTTP listener that also
// serves /metrics (the kubelet's probes carry no client certificate).
func (x *Extender) ProbeHandler() http.Handler {
	mux := http.NewServeMux()
	x.probes(mux)
	return mux
}

func (x *Extender) probes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !x.Synced() {
			http.Error(w, "node informer not synced yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
}

// each calls fn for every Node of a request, in order, with what the index (or the sent object)
// says: node is the sent object when the scheduler is not nodeCacheCapable, info is nil when the
// extender has never seen the Node. It allocates nothing, so a 5,000-Node request stays cheap.
func (x *Extender) each(a *extenderv1.ExtenderArgs, fn func(i int, name string, node *corev1.Node, info *NodeInfo)) int {
	if a.Nodes != nil {
		for i := range a.Nodes.Items {
			n := &a.Nodes.Items[i]
			fn(i, n.Name, n, x.index.info(n))
		}
		return len(a.Nodes.Items)
	}
	if a.NodeNames == nil {
		return 0
	}
	x.index.mu.RLock()
	defer x.index.mu.RUnlock()
	for i, name := range *a.NodeNames {
		fn(i, name, nil, x.index.nodes[name])
	}
	return len(*a.NodeNames)
}

func (x *Extender) count(a *extenderv1.ExtenderArgs) int {
	switch {
	case a.Nodes != nil:
		return len(a.Nodes.Items)
	case a.NodeNames != nil:
		return len(*a.NodeNames)
	}
	return 0
}

// Filter keeps every candidate unless FilterFailed is set and the pod's model failed on it.
func (x *Extender) Filter(a *extenderv1.ExtenderArgs) *extenderv1.ExtenderFilterResult {
	res := &extenderv1.ExtenderFilterResult{}
	podModel := vllm.PodModel(a.Pod)
	check := x.cfg.FilterFailed && podModel != ""
	key := model.LabelKey(podModel)
	names := make([]string, 0, x.count(a))
	var items []corev1.Node
	n := x.each(a, func(_ int, name string, node *corev1.Node, info *NodeInfo) {
		if check && info != nil && info.States[key] == string(nodelabels.StateFailed) {
			if res.FailedAndUnresolvableNodes == nil {
				res.FailedAndUnresolvableNodes = extenderv1.FailedNodesMap{}
			}
			res.FailedAndUnresolvableNodes[name] = fmt.Sprintf("warmd: model %s failed on this node (%s=failed; see `warmd status` on it)", podModel, key)
			return
		}
		if node != nil {
			items = append(items, *node)
		} else {
			names = append(names, name)
		}
	})
	if a.Nodes != nil {
		res.Nodes = &corev1.NodeList{Items: items}
	} else {
		res.NodeNames = &names
	}
	x.logFilter(a.Pod, podModel, n, res.FailedAndUnresolvableNodes)
	return res
}

// Prioritize scores every candidate 0–10 by predicted time-to-ready for the pod's model: the fastest
// Node gets MaxExtenderPriority and another 1 + 9 × fastest ÷ its own, rounded (twice as slow: 6),
// so every Node with a prediction scores at least 1, above every Node without one (0), however slow
// it is. Nodes without a prediction for the model, and Nodes where warmd says the model failed,
// score 0; a pod without a model scores 0 everywhere (neutral: equal scores change no ranking).
func (x *Extender) Prioritize(a *extenderv1.ExtenderArgs) *extenderv1.HostPriorityList {
	list := make(extenderv1.HostPriorityList, x.count(a))
	model := vllm.PodModel(a.Pod)
	best := math.Inf(1)
	predicted := 0
	// First pass: remember each Node's prediction in Score as milliseconds (-1: none).
	x.each(a, func(i int, name string, _ *corev1.Node, info *NodeInfo) {
		list[i] = extenderv1.HostPriority{Host: name, Score: -1}
		if model == "" || info == nil || info.failed(model) {
			return
		}
		if s, ok := info.Predicted[model]; ok {
			list[i].Score = int64(math.Round(max(s, 0) * 1000))
			best = min(best, float64(list[i].Score))
			predicted++
		}
	})
	for i := range list {
		list[i].Score = score(list[i].Score, best)
	}
	x.logPrioritize(a.Pod, model, list, predicted)
	return &list
}

// score maps a prediction in milliseconds (-1: none) to the extender's 0–10 range, given the
// fastest prediction among the candidates.
func score(ms int64, best float64) int64 {
	const span = extenderv1.MaxExtenderPriority - extenderv1.MinExtenderPriority - 1 // 9
	switch {
	case ms < 0:
		return extenderv1.MinExtenderPriority
	case float64(ms) <= best:
		return extenderv1.MaxExtenderPriority
	}
	return extenderv1.MinExtenderPriority + 1 + int64(math.Round(float64(span)*best/float64(ms)))
}
