package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// RecorderOptions tune a Recorder. Zero values take the defaults, which are client-go's event
// broadcaster's.
type RecorderOptions struct {
	// RepeatWindow: an Event equal to one recorded within it (same object, type, reason and
	// message) raises that Event's count rather than making a new one. Default 10m.
	RepeatWindow time.Duration
	// Burst and Refill bound the Events one object gets: Burst at once, then one per Refill; the
	// rest are dropped (and logged). Defaults 25 and 5m.
	Burst  int
	Refill time.Duration
	// Queue bounds the Events waiting to be written (default 1000): Event never blocks its caller,
	// and past the bound an Event is dropped (and logged) rather than held.
	Queue int
	// Attempts bounds the writes of one Event (default 3), RetryWait apart (default 10s).
	Attempts  int
	RetryWait time.Duration
}

func (o RecorderOptions) withDefaults() RecorderOptions {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.RepeatWindow, 10*time.Minute)
	def(&o.Refill, 5*time.Minute)
	def(&o.RetryWait, 10*time.Second)
	if o.Burst <= 0 {
		o.Burst = 25
	}
	if o.Queue <= 0 {
		o.Queue = 1000
	}
	if o.Attempts <= 0 {
		o.Attempts = 3
	}
	return o
}

// Recorder writes Kubernetes Events about objects (`kubectl describe`, `kubectl get events`): one
// goroutine writes them in order from a bounded queue, a repeat is counted on the Event it repeats
// (a merge patch of count and lastTimestamp), and each object's Events are rate-bounded, so a
// flapping state cannot flood etcd. It does what warmd needed of client-go's event broadcaster,
// without its strategic-merge-patch correlator (which links the OpenAPI models, ~1.4 MB).
type Recorder struct {
	c      Interface
	source corev1.EventSource
	o      RecorderOptions
	log    *slog.Logger
	queue  chan *corev1.Event
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	// The writer's own state (only its goroutine touches these).
	seen   map[string]*corev1.Event // last Event written per repeat key
	limits map[string]*rate.Limiter // per object
}

// NewRecorder starts a Recorder writing Events from source through c. Call Shutdown when done.
func NewRecorder(c Interface, source corev1.EventSource, o RecorderOptions, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o = o.withDefaults()
	r := &Recorder{c: c, source: source, o: o, log: log, queue: make(chan *corev1.Event, o.Queue),
		stop: make(chan struct{}), done: make(chan struct{}),
		seen: map[string]*corev1.Event{}, limits: map[string]*rate.Limiter{}}
	go r.run()
	return r
}

// Ref is the reference an Event about o (of kind, in core/v1 unless apiVersion says otherwise) carries.
func Ref(kind, apiVersion string, o metav1.Object) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: kind, APIVersion: apiVersion, Namespace: o.GetNamespace(), Name: o.GetName(),
		UID: o.GetUID(), ResourceVersion: o.GetResourceVersion()}
}

// Event records an Event of type (corev1.EventTypeNormal or EventTypeWarning) about ref. It never
// blocks: the write happens later, and an Event that finds the queue full is dropped.
func (r *Recorder) Event(ref *corev1.ObjectReference, eventType, reason, message string) {
	if r == nil || ref == nil {
		return
	}
	now := metav1.Now()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault // cluster-scoped objects' Events live in default, as the kubelet's do
	}
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()), Namespace: ns},
		InvolvedObject: *ref, Reason: reason, Message: message, Type: eventType, Source: r.source,
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: r.source.Component, ReportingInstance: r.source.Host,
	}
	select {
	case <-r.stop:
	case r.queue <- e:
	default:
		r.log.Warn("event dropped: too many waiting to be written", "object", ref.Kind+"/"+ref.Name, "reason", reason, "queue", r.o.Queue)
	}
}

// Shutdown stops the Recorder, writing what is queued first for up to a few seconds.
func (r *Recorder) Shutdown() {
	if r == nil {
		return
	}
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// shutdownFlush bounds how long Shutdown spends writing what was queued.
const shutdownFlush = 5 * time.Second

func (r *Recorder) run() {
	defer close(r.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		select {
		case e := <-r.queue:
			r.record(ctx, e)
		case <-r.stop:
			t := time.AfterFunc(shutdownFlush, cancel)
			defer t.Stop()
			for {
				select {
				case e := <-r.queue:
					r.record(ctx, e)
				default:
					return
				}
			}
		}
	}
}

func objectKey(ref *corev1.ObjectReference) string {
	return ref.Kind + "\x00" + ref.Namespace + "\x00" + ref.Name + "\x00" + string(ref.UID)
}

// record applies the object's bound, then counts e on the Event it repeats or creates it.
func (r *Recorder) record(ctx context.Context, e *corev1.Event) {
	if ctx.Err() != nil {
		return
	}
	obj := objectKey(&e.InvolvedObject)
	lim := r.limits[obj]
	if lim == nil {
		if len(r.limits) >= maxTracked {
			clear(r.limits)
		}
		lim = rate.NewLimiter(rate.Every(r.o.Refill), r.o.Burst)
		r.limits[obj] = lim
	}
	if !lim.Allow() {
		r.log.Warn("event dropped: too many for one object (bounded to protect the API server)",
			"object", e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name, "reason", e.Reason)
		return
	}
	key := obj + "\x00" + e.Type + "\x00" + e.Reason + "\x00" + e.Message
	if prev := r.seen[key]; prev != nil && e.LastTimestamp.Sub(prev.LastTimestamp.Time) <= r.o.RepeatWindow {
		next := prev.DeepCopy()
		next.Count++
		next.LastTimestamp = e.LastTimestamp
		written, err := r.write(ctx, func(ctx context.Context) (*corev1.Event, error) {
			patch, _ := json.Marshal(map[string]any{"count": next.Count, "lastTimestamp": next.LastTimestamp})
			return r.c.CoreV1().Events(next.Namespace).Patch(ctx, next.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		})
		switch {
		case err == nil:
			r.seen[key] = written
			return
		case !apierrors.IsNotFound(err):
			r.fail(e, err)
			return
		}
		// The Event it repeats expired (the API server keeps Events an hour): write it anew.
	}
	written, err := r.write(ctx, func(ctx context.Context) (*corev1.Event, error) {
		return r.c.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
	})
	if err != nil {
		r.fail(e, err)
		return
	}
	if len(r.seen) >= maxTracked {
		clear(r.seen)
	}
	r.seen[key] = written
}

// maxTracked bounds the objects and repeat keys a Recorder remembers; past it they are forgotten
// at once (a repeat then makes a new Event, which costs only a little more).
const maxTracked = 4096

// write runs one write up to Attempts times, each bounded by eventTimeout. A NotFound answer is
// returned at once (the caller decides what it means), as is an answer that cannot succeed on retry.
func (r *Recorder) write(ctx context.Context, do func(context.Context) (*corev1.Event, error)) (*corev1.Event, error) {
	var err error
	for i := range r.o.Attempts {
		if i > 0 {
			t := time.NewTimer(r.o.RetryWait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, err
			case <-t.C:
			}
		}
		wctx, cancel := context.WithTimeout(ctx, eventTimeout)
		var e *corev1.Event
		e, err = do(wctx)
		cancel()
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) ||
			apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
			return e, err
		}
	}
	return nil, err
}

func (r *Recorder) fail(e *corev1.Event, err error) {
	r.log.Warn("event not written", "object", e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name, "reason", e.Reason, "err", err)
}

// eventTimeout bounds one Event write.
const eventTimeout = 30 * time.Second
