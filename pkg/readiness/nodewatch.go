package readiness

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"warmd.io/warmd/pkg/config"
)

// ModelWanted reports whether a model's nodeSelector selects a node with these labels. An empty
// selector selects every node. The selector was checked by config.Validate, so an error here means
// a config that skipped validation.
func ModelWanted(m config.Model, nodeLabels map[string]string) (bool, error) {
	if m.NodeSelector == nil {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(m.NodeSelector)
	if err != nil {
		return false, fmt.Errorf("model %s: nodeSelector: %w (fix models[].nodeSelector in the config)", m.Name, err)
	}
	return sel.Matches(labels.Set(nodeLabels)), nil
}

// NodeWatcher keeps this node's own Node object current through a watch limited to that one object
// (field selector metadata.name), so it costs the API server one watch per node. The other parts ask
// it whether this node wants a model; the Writer is fed every copy it sees.
type NodeWatcher struct {
	client   kubernetes.Interface
	nodeName string

	mu      sync.Mutex
	node    *corev1.Node
	subs    []func(*corev1.Node)
	changed chan struct{}
	synced  chan struct{}
}

// NewNodeWatcher returns a watcher for nodeName; Run starts it.
func NewNodeWatcher(client kubernetes.Interface, nodeName string) *NodeWatcher {
	return &NodeWatcher{client: client, nodeName: nodeName, changed: make(chan struct{}), synced: make(chan struct{})}
}

// OnNode registers f to be called with every new copy of the Node (before Run).
func (w *NodeWatcher) OnNode(f func(*corev1.Node)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs = append(w.subs, f)
}

// Run watches until ctx ends. client-go's reflector retries a lost API server by itself, so an
// outage only delays updates.
func (w *NodeWatcher) Run(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(w.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.nodeName).String()
	}))
	inf := f.Core().V1().Nodes().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.set(o) },
		UpdateFunc: func(_, o any) { w.set(o) },
		DeleteFunc: func(any) { w.set(nil) },
	})
	if err != nil {
		return fmt.Errorf("watch node %s: %w", w.nodeName, err)
	}
	f.Start(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			close(w.synced)
		}
	}()
	<-ctx.Done()
	f.Shutdown()
	return nil
}

func (w *NodeWatcher) set(o any) {
	n, _ := o.(*corev1.Node)
	w.mu.Lock()
	w.node = n
	subs := w.subs
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	for _, f := range subs {
		f(n)
	}
}

// Synced is closed once the first list of the Node has arrived.
func (w *NodeWatcher) Synced() <-chan struct{} { return w.synced }

// Changed is closed at the next change of the Node.
func (w *NodeWatcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Node returns the newest copy, nil before the first or after the Node was deleted.
func (w *NodeWatcher) Node() *corev1.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.node
}

// Labels returns a copy of the Node's labels (empty before the first copy arrived).
func (w *NodeWatcher) Labels() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.node == nil {
		return map[string]string{}
	}
	return maps.Clone(w.node.Labels)
}

// Wants reports whether this node wants model m; known is false until the Node has been read, and
// callers should then not start work they would have to undo.
func (w *NodeWatcher) Wants(m config.Model) (wanted, known bool) {
	select {
	case <-w.synced:
	default:
		return false, false
	}
	ok, err := ModelWanted(m, w.Labels())
	return ok && err == nil, true
}

// NodeView is the node's view of itself that every part can hold from the start, before the
// readiness part exists: cmd/warmd creates one, passes it to NewPartFactory, and hands it to the parts
// that must know whether this node wants a model. With readiness disabled (no API server) selectors
// are evaluated against no labels, so only models without a nodeSelector are wanted.
type NodeView struct {
	w        atomic.Pointer[NodeWatcher]
	disabled atomic.Bool
}

// Wants reports whether this node wants model m; known is false until the Node has been read.
func (v *NodeView) Wants(m config.Model) (wanted, known bool) {
	if v.disabled.Load() {
		ok, err := ModelWanted(m, nil)
		return ok && err == nil, true
	}
	w := v.w.Load()
	if w == nil {
		return false, false
	}
	return w.Wants(m)
}

// Labels returns the Node's labels (empty until known).
func (v *NodeView) Labels() map[string]string {
	if w := v.w.Load(); w != nil {
		return w.Labels()
	}
	return map[string]string{}
}
