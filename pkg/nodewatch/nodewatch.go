// Package nodewatch keeps warmd's view of its own Node: one watch limited to that object, its labels,
// and through each model's nodeSelector whether this node wants the model at all. Images and weights
// ask it before fetching; readiness feeds every copy to its Node writer.
//
// It is built once, first, from the one API client the daemon has (pkg/assemble), and runs as a part
// of its own. Without an API server (readiness.disabled) Off stands in: the Node is "known" with no
// labels, so only models without a nodeSelector are wanted. It does not write the Node (pkg/readiness
// does).
package nodewatch

import (
	"context"
	"fmt"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/kube"
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

// Watcher keeps this node's own Node object current through a watch limited to that one object
// (field selector metadata.name), so it costs the API server one watch per node.
type Watcher struct {
	client   kube.Interface // nil: Off
	nodeName string

	mu       sync.Mutex
	node     *corev1.Node
	subs     []func(*corev1.Node)
	labelFns []func()
	last     map[string]string // labels the label subscribers last saw
	changed  chan struct{}
	synced   chan struct{}
}

// New returns a watcher of nodeName on client; Run starts it.
func New(client kube.Interface, nodeName string) *Watcher {
	return &Watcher{client: client, nodeName: nodeName, changed: make(chan struct{}), synced: make(chan struct{})}
}

// Off returns the stand-in for a daemon without an API server: known from the start, no labels, and
// Run only waits.
func Off(nodeName string) *Watcher {
	w := New(nil, nodeName)
	close(w.synced)
	return w
}

// Name is the part's name in logs, the daemon status and /readyz.
func (w *Watcher) Name() string { return "node" }

// Ready is nil once the Node has been read (at once for Off): until then selectors cannot be
// evaluated and the parts hold back models that have one.
func (w *Watcher) Ready() error {
	select {
	case <-w.synced:
		return nil
	default:
		return fmt.Errorf("waiting for the first read of Node %s from the API server", w.nodeName)
	}
}

// OnNode registers f to be called with every new copy of the Node (before Run).
func (w *Watcher) OnNode(f func(*corev1.Node)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs = append(w.subs, f)
}

// OnLabels registers f to be called when the Node's labels change (and at the first copy), so parts
// whose wanted models depend on them look again. Copies that change only status (heartbeats) do not
// call it.
func (w *Watcher) OnLabels(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.labelFns = append(w.labelFns, f)
}

// Run watches until ctx ends. client-go's reflector retries a lost API server by itself, so an
// outage only delays updates.
func (w *Watcher) Run(ctx context.Context) error {
	if w.client == nil {
		<-ctx.Done()
		return nil
	}
	inf := kube.NodeInformer(w.client, 0, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.nodeName).String()
	})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.set(o) },
		UpdateFunc: func(_, o any) { w.set(o) },
		DeleteFunc: func(any) { w.set(nil) },
	})
	if err != nil {
		return fmt.Errorf("watch node %s: %w", w.nodeName, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.Run(ctx.Done())
	}()
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			close(w.synced)
			w.notifyLabels() // a Node that does not exist yet still ends the wait: no labels
		}
	}()
	<-done // the informer stops when ctx ends
	return nil
}

func (w *Watcher) set(o any) {
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
	w.notifyLabels()
}

// notifyLabels calls the label subscribers when the labels differ from what they last saw.
func (w *Watcher) notifyLabels() {
	w.mu.Lock()
	cur := map[string]string{}
	if w.node != nil {
		cur = w.node.Labels
	}
	if w.last != nil && maps.Equal(w.last, cur) {
		w.mu.Unlock()
		return
	}
	w.last = maps.Clone(cur)
	fns := w.labelFns
	w.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// Synced is closed once the first list of the Node has arrived.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// Changed is closed at the next change of the Node.
func (w *Watcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Node returns the newest copy, nil before the first or after the Node was deleted.
func (w *Watcher) Node() *corev1.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.node
}

// Labels returns a copy of the Node's labels (empty before the first copy arrived).
func (w *Watcher) Labels() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.node == nil {
		return map[string]string{}
	}
	return maps.Clone(w.node.Labels)
}

// Wants reports whether this node wants model m; known is false until the Node has been read, and
// callers should then not start work they would have to undo.
func (w *Watcher) Wants(m config.Model) (wanted, known bool) {
	if w.Ready() != nil {
		return false, false
	}
	ok, err := ModelWanted(m, w.Labels())
	return ok && err == nil, true
}

// Wanted is Wants for parts that must decide now: until the Node has been read (or while the API
// server is away at start) only models without a nodeSelector are wanted, and selected ones wait
// rather than fetch what may be undone. OnLabels tells when to ask again.
func (w *Watcher) Wanted(m config.Model) bool {
	if ok, known := w.Wants(m); known {
		return ok
	}
	ok, err := ModelWanted(m, nil)
	return ok && err == nil
}
