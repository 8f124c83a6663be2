package kube_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/kube"
)

// The recorder on a real API server: Events land in the object's namespace (default for a Node), a
// repeat raises the first Event's count, a repeat of an Event that is gone is written anew, each
// object's Events are bounded, and Shutdown writes what was queued.
func TestRecorder(t *testing.T) {
	env := kubeenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := kube.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vllm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	src := corev1.EventSource{Component: "warmd", Host: "gpu-1"}
	events := func(ns, name string) []corev1.Event {
		l, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	total := func(evs []corev1.Event) (n int32) {
		for _, e := range evs {
			n += e.Count
		}
		return n
	}
	node := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "gpu-1", UID: "gpu-1"}

	t.Run("repeats are counted on one Event", func(t *testing.T) {
		rec := kube.NewRecorder(c, src, kube.RecorderOptions{}, nil)
		for range 3 {
			rec.Event(node, corev1.EventTypeNormal, "ModelWarm", "model a is warm")
		}
		pod := kube.Ref("Pod", "v1", &metav1.ObjectMeta{Namespace: "vllm", Name: "vllm-0", UID: "u-1"})
		rec.Event(pod, corev1.EventTypeWarning, "CompileCacheMiss", "predicted miss")
		rec.Shutdown()
		evs := events(metav1.NamespaceDefault, "gpu-1")
		if len(evs) != 1 || evs[0].Count != 3 || evs[0].Reason != "ModelWarm" || evs[0].Source != src ||
			evs[0].ReportingController != "warmd" || evs[0].ReportingInstance != "gpu-1" || evs[0].InvolvedObject != *node {
			t.Fatalf("Node events: %+v; want one ModelWarm with count 3 from warmd on gpu-1", evs)
		}
		if !evs[0].LastTimestamp.After(evs[0].FirstTimestamp.Time) && !evs[0].LastTimestamp.Equal(&evs[0].FirstTimestamp) {
			t.Errorf("lastTimestamp %v before firstTimestamp %v", evs[0].LastTimestamp, evs[0].FirstTimestamp)
		}
		if p := events("vllm", "vllm-0"); len(p) != 1 || p[0].Type != corev1.EventTypeWarning || p[0].InvolvedObject.UID != "u-1" {
			t.Errorf("Pod events in vllm: %+v; want the one warning", p)
		}
	})

	t.Run("a repeat of a deleted Event is written anew", func(t *testing.T) {
		ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "gpu-gone", UID: "gpu-gone"}
		rec := kube.NewRecorder(c, src, kube.RecorderOptions{}, nil)
		defer rec.Shutdown()
		rec.Event(ref, corev1.EventTypeNormal, "NodeWarm", "all warm")
		var first []corev1.Event
		waitFor(t, "the first Event", func() bool { first = events(metav1.NamespaceDefault, "gpu-gone"); return len(first) == 1 })
		if err := c.CoreV1().Events(metav1.NamespaceDefault).Delete(ctx, first[0].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.Event(ref, corev1.EventTypeNormal, "NodeWarm", "all warm")
		waitFor(t, "the repeat written anew", func() bool {
			evs := events(metav1.NamespaceDefault, "gpu-gone")
			return len(evs) == 1 && evs[0].Name != first[0].Name && evs[0].Count == 1
		})
	})

	t.Run("each object is bounded", func(t *testing.T) {
		rec := kube.NewRecorder(c, src, kube.RecorderOptions{Burst: 4, Refill: time.Hour}, nil)
		flapping := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "gpu-flap", UID: "gpu-flap"}
		calm := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "gpu-calm", UID: "gpu-calm"}
		for i := range 30 {
			rec.Event(flapping, corev1.EventTypeWarning, "ModelFailed", fmt.Sprintf("attempt %d failed", i))
		}
		rec.Event(calm, corev1.EventTypeNormal, "NodeWarm", "all warm")
		rec.Shutdown()
		if n := total(events(metav1.NamespaceDefault, "gpu-flap")); n != 4 {
			t.Errorf("a flapping object got %d events, want the burst of 4", n)
		}
		if n := total(events(metav1.NamespaceDefault, "gpu-calm")); n != 1 {
			t.Errorf("another object got %d events, want its 1: one object's bound costs only itself", n)
		}
	})
}
