package kube

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// EventSink writes an event recorder's Events through c, into each Event's own namespace, as
// client-go's typed EventSinkImpl does; each write is bounded by eventTimeout (the recorder's own
// calls carry no context).
type EventSink struct{ C Interface }

// eventTimeout bounds one Event write: the recorder retries a failed one itself.
const eventTimeout = 30 * time.Second

func eventCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), eventTimeout)
}

var _ record.EventSink = EventSink{}

// Create implements record.EventSink.
func (s EventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := eventCtx()
	defer cancel()
	return s.C.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
}

// Update implements record.EventSink.
func (s EventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := eventCtx()
	defer cancel()
	return s.C.CoreV1().Events(e.Namespace).Update(ctx, e, metav1.UpdateOptions{})
}

// Patch implements record.EventSink (a strategic merge patch, as the recorder's correlator makes).
func (s EventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	ctx, cancel := eventCtx()
	defer cancel()
	return s.C.CoreV1().Events(e.Namespace).Patch(ctx, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
