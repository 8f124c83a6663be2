// Package podwatch is this node's one watch of the Pods bound to it (field selector spec.nodeName),
// shared by every part that reacts to pods (pre-warm, the compile-cache key check): one LIST and one
// WATCH on the API server per node, whatever the number of parts, as kubelet-side agents keep one
// informer per resource. The watch starts when the first part subscribes and stops when the last
// one leaves, so a node whose pod-reading parts are all turned off watches nothing.
package podwatch

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/state"
)

// Watcher is the shared watch of this node's pods. The zero value is not usable: use New.
type Watcher struct {
	client kube.Interface
	node   string

	mu   sync.Mutex
	subs map[*subscription]struct{}
	cur  *watch // nil while nobody subscribes
}

// watch is one run of the informer, from the first subscriber to the last.
type watch struct {
	inf    cache.SharedIndexInformer
	lister corelisters.PodLister
	stop   chan struct{}
	done   chan struct{} // closed when the informer has stopped
	prob   string        // why the watch failed last; "" after the next event (Watcher.mu)
}

// New returns the watch of node's pods through client; nothing is asked of the API server until a
// part subscribes.
func New(client kube.Interface, node string) *Watcher {
	return &Watcher{client: client, node: node, subs: map[*subscription]struct{}{}}
}

// Node is the node whose pods are watched.
func (w *Watcher) Node() string { return w.node }

// Subscribe joins the watch, starting it when nobody watched: the subscription's Changed channel
// is poked (never blocking: one poke stands for any number) on every pod event and watch error, and
// once at the start so the subscriber lists what is there. Close leaves it.
func (w *Watcher) Subscribe() (Subscription, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil {
		cur, err := w.start()
		if err != nil {
			return nil, err
		}
		w.cur = cur
	}
	s := &subscription{w: w, cur: w.cur, c: make(chan struct{}, 1)}
	w.subs[s] = struct{}{}
	s.poke()
	return s, nil
}

// start builds and starts one informer run; w.mu is held.
func (w *Watcher) start() (*watch, error) {
	inf := kube.PodInformer(w.client, 0, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", w.node).String()
	})
	cur := &watch{inf: inf, lister: corelisters.NewPodLister(inf.GetIndexer()), stop: make(chan struct{}), done: make(chan struct{})}
	event := func(any) { // an event: the watch works (again)
		w.mu.Lock()
		cur.prob = ""
		w.pokeAll()
		w.mu.Unlock()
	}
	if _, err := cur.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: event, UpdateFunc: func(_, o any) { event(o) }, DeleteFunc: event,
	}); err != nil {
		return nil, err
	}
	if err := cur.inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		w.mu.Lock()
		cur.prob = "watching pods: " + state.Reason(err)
		w.pokeAll()
		w.mu.Unlock()
	}); err != nil {
		return nil, err
	}
	go func() {
		defer close(cur.done)
		cur.inf.Run(cur.stop)
	}()
	return cur, nil
}

// pokeAll pokes every subscriber; w.mu is held.
func (w *Watcher) pokeAll() {
	for s := range w.subs {
		s.poke()
	}
}

// Subscription is one part's membership in the watch: what a part reads of this node's pods. The
// parts hold it as this interface (they get the watch as daemon.Deps.Pods), so a part's tests can
// hand it pods of their own.
type Subscription interface {
	// Changed is poked on every pod event and watch error (never blocking: one poke stands for any
	// number).
	Changed() <-chan struct{}
	// Synced reports whether the watch has listed the node's pods once.
	Synced() bool
	// Pods lists the node's pods from the watch cache (shared: callers must not modify them).
	Pods() ([]*corev1.Pod, error)
	// Problem is why the watch failed last ("watching pods: …"), "" while it works.
	Problem() string
	// Close leaves the watch; the last subscriber to leave stops it.
	Close()
}

var _ Subscription = (*subscription)(nil)

// subscription is the Watcher's Subscription.
type subscription struct {
	w      *Watcher
	cur    *watch
	c      chan struct{}
	closed bool // (w.mu)
}

func (s *subscription) poke() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// Changed is poked on every pod event and watch error.
func (s *subscription) Changed() <-chan struct{} { return s.c }

// Synced reports whether the watch has listed the node's pods once.
func (s *subscription) Synced() bool { return s.cur.inf.HasSynced() }

// Pods lists the node's pods from the watch cache (shared: callers must not modify them).
func (s *subscription) Pods() ([]*corev1.Pod, error) { return s.cur.lister.List(labels.Everything()) }

// Problem is why the watch failed last ("watching pods: …"), "" while it works.
func (s *subscription) Problem() string {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.cur.prob
}

// Close leaves the watch; the last subscriber to leave stops it (and waits for its goroutines).
func (s *subscription) Close() {
	w := s.w
	w.mu.Lock()
	if s.closed {
		w.mu.Unlock()
		return
	}
	s.closed = true
	delete(w.subs, s)
	var last *watch
	if len(w.subs) == 0 && w.cur == s.cur {
		last, w.cur = w.cur, nil
	}
	w.mu.Unlock()
	if last != nil {
		close(last.stop)
		<-last.done // the informer has stopped, as the factory's Shutdown waited
	}
}
