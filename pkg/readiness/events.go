package readiness

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
)

// Event reasons warmd records on its Node (`kubectl describe node`, `kubectl get events`).
const (
	// ReasonModelWarm: a model became warm (image pinned, weights verified, compile cache present).
	ReasonModelWarm = "ModelWarm"
	// ReasonModelCold: a model that was warm is not any more (something was evicted or changed).
	ReasonModelCold = "ModelCold"
	// ReasonModelFailed: a model's warm-up failed; the message says why and the status has more.
	ReasonModelFailed = "ModelFailed"
	// ReasonNodeWarm / ReasonNodeCold: every wanted model warm / no longer all warm (warmd.io/warm).
	ReasonNodeWarm = "NodeWarm"
	ReasonNodeCold = "NodeCold"
)

// EventComponent is the source.component of warmd's Events.
const EventComponent = "warmd"

// eventMessageLimit caps a message: the Event API allows 1 KiB-ish messages, a reason from a part
// can be longer, and the full story is in `warmd status`.
const eventMessageLimit = 512

// EventOptions bound how many Events one node records. Zero values take the defaults.
type EventOptions struct {
	// Burst is how many Events may be recorded at once (10); then one per Every (30s). Transitions
	// beyond that are dropped (and logged): a node flapping between states must not flood etcd.
	Burst int
	Every time.Duration
	// Recorder tunes the Event recorder's own repeat counting (identical Events within 10 minutes
	// become one Event with a count) and per-object bound; tests change them.
	Recorder kube.RecorderOptions
}

// Events records warm/cold/failed transitions as Kubernetes Events on this node's Node. The writer
// calls Observe with what the Node said before a write and what it wrote, so a transition is
// recorded once, when the Node really changed, and a warmd restart (which finds the labels already
// there) records nothing. Repeats are counted by the recorder (pkg/kube/recorder.go) and bounded by a
// per-node token bucket on top of it.
type Events struct {
	node  string
	rec   *kube.Recorder
	ref   *corev1.ObjectReference
	limit *rate.Limiter
	log   *slog.Logger
}

// NewEvents starts recording to the API server through cs. Call Shutdown when done.
func NewEvents(cs kube.Interface, node string, o EventOptions, log *slog.Logger) *Events {
	if o.Burst <= 0 {
		o.Burst = 10
	}
	if o.Every <= 0 {
		o.Every = 30 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Events{
		node: node,
		rec:  kube.NewRecorder(cs, corev1.EventSource{Component: EventComponent, Host: node}, o.Recorder, log),
		// UID = node name, as the kubelet's Node events, so `kubectl describe node` lists them.
		ref:   &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)},
		limit: rate.NewLimiter(rate.Every(o.Every), o.Burst),
		log:   log,
	}
}

// Shutdown stops the recorder (pending Events are flushed best-effort).
func (e *Events) Shutdown() {
	if e != nil {
		e.rec.Shutdown()
	}
}

// Transition is one recorded (or to-be-recorded) Event.
type Transition struct {
	Type, Reason, Message string
}

// Transitions compares the Node's labels before a write with the desired content and returns the
// Events the change deserves, in model-name order then the node-level one. A model seen for the
// first time cold (just configured) deserves none; one already warm on an unchanged Node none.
func Transitions(before map[string]string, d Desired) []Transition {
	names := make([]string, 0, len(d.Models))
	for _, m := range d.Models {
		names = append(names, m.Name)
	}
	keys := model.LabelKeys(names)
	var out []Transition
	for _, m := range d.Models {
		prev, cur := nodelabels.State(before[keys[m.Name]]), m.State
		if prev == cur {
			continue
		}
		switch {
		case cur == nodelabels.StateWarm:
			out = append(out, Transition{corev1.EventTypeNormal, ReasonModelWarm,
				fmt.Sprintf("model %s is warm on this node (was %s)", m.Name, orNone(prev))})
		case cur == nodelabels.StateFailed:
			out = append(out, Transition{corev1.EventTypeWarning, ReasonModelFailed,
				fmt.Sprintf("model %s failed on this node: %s", m.Name, m.Reason)})
		case prev == nodelabels.StateWarm:
			out = append(out, Transition{corev1.EventTypeWarning, ReasonModelCold,
				fmt.Sprintf("model %s is no longer warm on this node (now %s, missing %s)", m.Name, cur, strings.Join(m.Missing, ", "))})
		}
	}
	if prev, cur := before[nodelabels.LabelWarm], d.Labels[nodelabels.LabelWarm]; prev != cur {
		switch {
		case cur == "true":
			out = append(out, Transition{corev1.EventTypeNormal, ReasonNodeWarm,
				fmt.Sprintf("every model this node wants is warm (%d)", len(d.Models))})
		case prev == "true":
			out = append(out, Transition{corev1.EventTypeWarning, ReasonNodeCold, "not every model this node wants is warm any more: " + d.Condition.Message})
		}
	}
	for i := range out {
		out[i].Message = cleanMessage(out[i].Message)
	}
	return out
}

func orNone(s nodelabels.State) nodelabels.State {
	if s == "" {
		return "unknown"
	}
	return s
}

// cleanMessage keeps a message one printable line of bounded length.
func cleanMessage(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
	return clip(s, eventMessageLimit)
}

// Observe records the transitions between before (the Node's labels before the write) and d.
func (e *Events) Observe(before map[string]string, d Desired) {
	if e == nil {
		return
	}
	for _, t := range Transitions(before, d) {
		if !e.limit.Allow() {
			e.log.Warn("node event dropped: too many warm-state transitions (bounded to protect the API server)",
				"node", e.node, "reason", t.Reason)
			continue
		}
		e.rec.Event(e.ref, t.Type, t.Reason, t.Message)
	}
}
