package readiness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/nodelabels"
)

// ErrNodeMissing is returned while the Node object does not exist: warmd never creates Nodes (its
// RBAC has no create verb either); it waits for the kubelet to register the node.
var ErrNodeMissing = errors.New("node object not found")

// WriterOptions configure a Writer. Zero durations take the defaults in parentheses.
type WriterOptions struct {
	NodeName string
	Client   kube.Interface
	// Clock drives resync, heartbeat, rate limit and backoff; tests inject a fake one.
	Clock   clock.WithTicker
	Log     *slog.Logger
	Metrics *metrics.Readiness
	// Resync re-reads the Node from the server and corrects it (5m).
	Resync time.Duration
	// Heartbeat refreshes the condition's lastHeartbeatTime even when nothing changed (5m, as NPD
	// and the kubelet's node status), so a stale WarmdReady shows that warmd stopped reporting.
	Heartbeat time.Duration
	// MinInterval is the least time between two sync rounds (1s): changes arriving faster are
	// batched into one write.
	MinInterval time.Duration
	// MaxBackoff caps the retry delay after failed writes (2m); the first retry waits MinInterval.
	MaxBackoff time.Duration
	// StartupTaint puts warmd.io/cold:NoSchedule on a node that was never warm.
	StartupTaint bool
	// StatusCap bounds the warmd.io/status annotation in bytes (DefaultStatusCap).
	StatusCap int
	// OnSync, when set, is called after every sync round (the part publishes its status from it).
	OnSync func(SyncResult)
	// Events, when set, records warm/cold/failed transitions on the Node (see events.go).
	Events *Events
}

// Writer keeps warmd's labels, annotations, condition and taint on one Node equal to what the
// current Input implies. It writes only what differs from the server's copy, never keys other
// managers own with a different value, and never anything outside warmd's prefixes.
type Writer struct {
	o WriterOptions

	mu       sync.Mutex
	input    *Input
	node     *corev1.Node // newest copy seen (watch event or write response)
	stale    bool         // re-read before the next sync
	result   SyncResult
	kick     chan struct{}
	lastSync time.Time
}

// SyncResult reports one sync round, for the status section and tests.
type SyncResult struct {
	Time   time.Time `json:"time"`
	Writes int       `json:"writes"`
	// Blocked are keys another field manager holds with a different value; warmd leaves them alone.
	Blocked []string `json:"blocked,omitempty"`
	Error   string   `json:"error,omitempty"`
	// NodeMissing is true while the Node object does not exist.
	NodeMissing bool     `json:"nodeMissing,omitempty"`
	Desired     *Desired `json:"-"`
}

// NewWriter returns a Writer; it writes nothing until SetInput and Run (or Sync).
func NewWriter(o WriterOptions) *Writer {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	defDur(&o.Resync, 5*time.Minute)
	defDur(&o.Heartbeat, 5*time.Minute)
	defDur(&o.MinInterval, time.Second)
	defDur(&o.MaxBackoff, 2*time.Minute)
	return &Writer{o: o, kick: make(chan struct{}, 1), stale: true}
}

func defDur(p *time.Duration, v time.Duration) {
	if *p <= 0 {
		*p = v
	}
}

// SetInput replaces the facts the Node should reflect and schedules a sync.
func (w *Writer) SetInput(in Input) {
	w.mu.Lock()
	same := w.input != nil && reflect.DeepEqual(*w.input, in)
	w.input = &in
	w.mu.Unlock()
	if !same {
		w.trigger()
	}
}

// SetStartupTaint switches the startup taint (config reload).
func (w *Writer) SetStartupTaint(on bool) {
	w.mu.Lock()
	w.o.StartupTaint = on
	w.mu.Unlock()
	w.trigger()
}

// ObserveNode feeds a Node copy seen by a watch. A sync follows only if it may differ from desired.
func (w *Writer) ObserveNode(n *corev1.Node) {
	if n == nil || n.Name != w.o.NodeName {
		return
	}
	w.mu.Lock()
	if newer(n, w.node) {
		w.node = n
		w.stale = false
	}
	w.mu.Unlock()
	w.trigger()
}

// Result returns the outcome of the last sync round.
func (w *Writer) Result() SyncResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.result
}

func (w *Writer) trigger() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Run syncs on every change, every Resync (re-reading the Node), and whenever the heartbeat is due,
// no more often than MinInterval, backing off on failure. API errors never end it: the node keeps
// warming, and the Node is corrected when the server answers again. It returns when ctx ends.
func (w *Writer) Run(ctx context.Context) error {
	resync := w.o.Clock.NewTicker(w.o.Resync)
	defer resync.Stop()
	beat := w.o.Clock.NewTicker(w.o.Heartbeat / 4)
	defer beat.Stop()
	var retry <-chan time.Time
	backoff := w.o.MinInterval
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.kick:
		case <-beat.C():
		case <-retry:
		case <-resync.C():
			w.mu.Lock()
			w.stale = true
			w.mu.Unlock()
		}
		if wait := w.o.MinInterval - w.o.Clock.Since(w.lastSync); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-w.o.Clock.After(wait):
			}
		}
		w.lastSync = w.o.Clock.Now()
		if _, err := w.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.o.Log.Warn("node update failed; will retry", "node", w.o.NodeName, "in", backoff.String(), "err", err)
			retry = w.o.Clock.After(backoff)
			backoff = min(2*backoff, w.o.MaxBackoff)
			continue
		}
		retry, backoff = nil, w.o.MinInterval
	}
}

// Sync makes one round: compute desired, compare with the server's copy, write what differs.
// It returns the number of write requests sent.
func (w *Writer) Sync(ctx context.Context) (int, error) {
	w.mu.Lock()
	in, node, stale, taintOn := w.input, w.node, w.stale, w.o.StartupTaint
	w.mu.Unlock()
	if in == nil {
		return 0, nil // nothing known yet: publishing "cold" for everything would be a lie
	}
	res := SyncResult{Time: w.o.Clock.Now()}
	writes, err := w.sync(ctx, *in, node, stale, taintOn, &res)
	res.Writes = writes
	if err != nil {
		res.Error = err.Error()
		res.NodeMissing = errors.Is(err, ErrNodeMissing)
	}
	w.mu.Lock()
	w.result = res
	w.mu.Unlock()
	if w.o.OnSync != nil {
		w.o.OnSync(res)
	}
	if m := w.o.Metrics; m != nil {
		result := "ok"
		if err != nil {
			result = "error"
		}
		if writes > 0 || err != nil {
			m.NodeWrites.WithLabelValues(result).Add(float64(max(writes, 1)))
		}
		if res.Desired != nil {
			m.Observe(res.Desired.Warm, modelStates(res.Desired.Models))
		}
	}
	return writes, err
}

func modelStates(ms []ModelState) map[string]string {
	out := make(map[string]string, len(ms))
	for _, m := range ms {
		out[m.Name] = string(m.State)
	}
	return out
}

func (w *Writer) sync(ctx context.Context, in Input, node *corev1.Node, stale, taintOn bool, res *SyncResult) (int, error) {
	nodes := w.o.Client.CoreV1().Nodes()
	if node == nil || stale {
		n, err := nodes.Get(ctx, w.o.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("node %s: %w (warmd waits for the kubelet to register it)", w.o.NodeName, ErrNodeMissing)
		}
		if err != nil {
			return 0, fmt.Errorf("read node %s: %w", w.o.NodeName, err)
		}
		node = n
		w.keep(n)
	}
	before := ParseStatus(node.Annotations)
	d := Build(in, before.EverWarm, w.o.StatusCap)
	res.Desired = &d
	writes := 0

	// 1. labels and annotations: one apply, only when it would change something.
	labelsBefore := node.Labels
	if n, blocked, wrote, err := w.applyMetadata(ctx, node, d); err != nil {
		return writes, err
	} else {
		res.Blocked = blocked
		if wrote {
			writes++
			node = n
			w.o.Events.Observe(labelsBefore, d) // the Node changed: record the transitions it shows
		}
	}
	// 2. the condition, on the status subresource.
	if n, wrote, err := w.applyCondition(ctx, node, d.Condition); err != nil {
		return writes, err
	} else if wrote {
		writes++
		node = n
	}
	// 3. the startup taint: removed once warm; added only to a node never warm.
	want := hasColdTaint(node)
	switch {
	case d.Warm:
		want = false
	case taintOn && !before.EverWarm:
		want = true
	}
	if want != hasColdTaint(node) {
		if err := w.patchTaint(ctx, node, want); err != nil {
			return writes, err
		}
		writes++
	}
	return writes, nil
}

func (w *Writer) keep(n *corev1.Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if newer(n, w.node) {
		w.node = n
	}
	w.stale = false
}

// applyMetadata applies warmd's labels and annotations. Keys that another manager holds with a
// different value are left out (theirs stays); a conflict the server reports anyway (a race) drops
// those keys and retries once.
func (w *Writer) applyMetadata(ctx context.Context, node *corev1.Node, d Desired) (*corev1.Node, []string, bool, error) {
	ourL, otherL := metadataOwners(node, "labels")
	ourA, otherA := metadataOwners(node, "annotations")
	labels, blockedL := unblocked(d.Labels, node.Labels, otherL)
	annots, blockedA := unblocked(d.Annotations, node.Annotations, otherA)
	blocked := append(blockedL, blockedA...)
	if same(labels, node.Labels, ourL) && same(annots, node.Annotations, ourA) {
		return node, blocked, false, nil
	}
	for attempt := 0; ; attempt++ {
		ac := kube.NewNodeApply(w.o.NodeName).WithLabels(labels).WithAnnotations(annots)
		n, err := w.o.Client.CoreV1().Nodes().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager})
		if err == nil {
			w.keep(n)
			if len(blocked) > 0 {
				w.o.Log.Warn("left labels owned by other field managers alone", "node", w.o.NodeName, "keys", blocked)
			}
			return n, blocked, true, nil
		}
		cl, ca := conflictKeys(err)
		if attempt > 0 || len(cl)+len(ca) == 0 {
			if apierrors.IsNotFound(err) {
				err = ErrNodeMissing
			}
			return nil, blocked, false, fmt.Errorf("apply labels to node %s: %w", w.o.NodeName, err)
		}
		for _, k := range cl {
			delete(labels, k)
		}
		for _, k := range ca {
			delete(annots, k)
		}
		blocked = append(append(blocked, cl...), ca...)
	}
}

// unblocked returns want minus the keys other managers own with a different value on the server.
func unblocked(want nodelabels.Labels, have map[string]string, others map[string][]string) (nodelabels.Labels, []string) {
	out := maps.Clone(want)
	var blocked []string
	for k, v := range want {
		if hv, ok := have[k]; ok && hv != v && len(others[k]) > 0 {
			delete(out, k)
			blocked = append(blocked, k)
		}
	}
	slices.Sort(blocked)
	return out, blocked
}

// same reports whether the server already holds want, owned by warmd, and warmd owns nothing else.
func same(want nodelabels.Labels, have map[string]string, ours map[string]bool) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v || !ours[k] {
			return false
		}
	}
	for k := range ours {
		if _, ok := want[k]; !ok {
			return false
		}
	}
	return true
}

// applyCondition applies WarmdReady when its content changed or its heartbeat is due.
func (w *Writer) applyCondition(ctx context.Context, node *corev1.Node, c Condition) (*corev1.Node, bool, error) {
	now := w.o.Clock.Now()
	cur := findCondition(node, nodelabels.ConditionType)
	transition := metav1.NewTime(now)
	if cur != nil && cur.Status == c.Status {
		if cur.Reason == c.Reason && cur.Message == c.Message && now.Sub(cur.LastHeartbeatTime.Time) < w.o.Heartbeat {
			return node, false, nil
		}
		transition = cur.LastTransitionTime
	}
	ac := kube.NewNodeApply(w.o.NodeName).WithConditions(corev1.NodeCondition{
		Type: nodelabels.ConditionType, Status: c.Status, Reason: c.Reason, Message: c.Message,
		LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: transition})
	n, err := w.o.Client.CoreV1().Nodes().ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, false, fmt.Errorf("apply %s condition to node %s: %w", nodelabels.ConditionType, w.o.NodeName, err)
	}
	w.keep(n)
	return n, true, nil
}

// patchTaint adds or removes warmd.io/cold. spec.taints is an atomic list, so server-side apply would
// make warmd co-own (and on removal drop) everybody's taints; instead the whole list is rewritten
// with a resourceVersion precondition, keeping every other taint as the server has it, and retried
// on a conflicting concurrent change.
func (w *Writer) patchTaint(ctx context.Context, node *corev1.Node, add bool) error {
	nodes := w.o.Client.CoreV1().Nodes()
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			n, err := nodes.Get(ctx, w.o.NodeName, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("re-read node %s for its taints: %w", w.o.NodeName, err)
			}
			node = n
			if hasColdTaint(node) == add {
				return nil
			}
		}
		taints := []corev1.Taint{}
		for _, t := range node.Spec.Taints {
			if t.Key != nodelabels.TaintCold {
				taints = append(taints, t)
			}
		}
		if add {
			taints = append(taints, corev1.Taint{Key: nodelabels.TaintCold, Value: "true", Effect: corev1.TaintEffectNoSchedule})
		}
		body, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
			"spec":     map[string]any{"taints": taints},
		})
		if err != nil {
			return fmt.Errorf("encode taint patch: %w", err)
		}
		n, err := nodes.Patch(ctx, w.o.NodeName, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("update taint %s on node %s: %w", nodelabels.TaintCold, w.o.NodeName, err)
		}
		w.keep(n)
		w.o.Log.Info("startup taint updated", "node", w.o.NodeName, "taint", nodelabels.TaintCold+":NoSchedule", "present", add)
		return nil
	}
	return fmt.Errorf("update taint %s on node %s: the node kept changing under 5 attempts", nodelabels.TaintCold, w.o.NodeName)
}
