package readiness_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/readiness"
)

// nodeEvents lists warmd's Events about node as `kubectl describe node` finds them.
func nodeEvents(t *testing.T, cs kube.Interface, node string) []corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node, "involvedObject.uid": node, "source": readiness.EventComponent}
	l, err := cs.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(l.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	return l.Items
}

func eventSummary(evs []corev1.Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s/%s x%d: %s", e.Type, e.Reason, e.Count, e.Message))
	}
	return strings.Join(out, "\n")
}

// waitEvents polls until cond holds for the node's Events (recording is asynchronous).
func waitEvents(t *testing.T, cs kube.Interface, node, what string, cond func([]corev1.Event) bool) []corev1.Event {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs := nodeEvents(t, cs, node)
		if cond(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; events:\n%s", what, eventSummary(evs))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func reasons(evs []corev1.Event) map[string]int32 {
	m := map[string]int32{}
	for _, e := range evs {
		m[e.Reason] += max(e.Count, 1)
	}
	return m
}

// TestNodeEvents drives the writer through warm, cold and failed on a real API server and checks
// the Events it leaves on the Node: one per transition, none for an unchanged Node or a restart,
// repeats folded into one Event with a count, and a bound on how many a flapping node records.
func TestNodeEvents(t *testing.T) {
	env := kubeenv.Start(t)
	ctx := context.Background()
	const model = "Qwen/Qwen2.5-7B-Instruct"
	cold := readiness.ModelInput{Name: model, Wants: true, Weights: readiness.WeightsFacts{Revision: "main"}}
	warm := cold
	warm.Weights.VerifiedRevision = "main"
	failed := cold
	failed.Weights.Error = "GET s3://models/x: 403 Forbidden\nsecond line"
	input := func(m readiness.ModelInput) readiness.Input {
		return readiness.Input{SKU: "h100", Models: []readiness.ModelInput{m}}
	}
	sync := func(w *readiness.Writer, m readiness.ModelInput) {
		t.Helper()
		w.SetInput(input(m))
		if _, err := w.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	newWriter := func(node string, o readiness.EventOptions) (*readiness.Writer, *readiness.Events) {
		ev := readiness.NewEvents(env.Client, node, o, nil)
		t.Cleanup(ev.Shutdown)
		return readiness.NewWriter(readiness.WriterOptions{NodeName: node, Client: env.Client, Events: ev}), ev
	}

	t.Run("transitions", func(t *testing.T) {
		createNode(t, env.Client, "ev-a")
		w, _ := newWriter("ev-a", readiness.EventOptions{})
		sync(w, cold) // first sight, cold: nothing happened worth an Event
		sync(w, warm)
		evs := waitEvents(t, env.Client, "ev-a", "ModelWarm and NodeWarm", func(e []corev1.Event) bool {
			r := reasons(e)
			return r[readiness.ReasonModelWarm] == 1 && r[readiness.ReasonNodeWarm] == 1
		})
		for _, e := range evs {
			if e.Type != corev1.EventTypeNormal || !strings.Contains(e.Message, model) && e.Reason == readiness.ReasonModelWarm {
				t.Errorf("event %s/%s: %s", e.Type, e.Reason, e.Message)
			}
			if e.Source.Host != "ev-a" || e.InvolvedObject.Kind != "Node" {
				t.Errorf("event source %+v object %+v", e.Source, e.InvolvedObject)
			}
		}
		sync(w, warm) // unchanged: no Event
		sync(w, cold) // evicted
		sync(w, failed)
		evs = waitEvents(t, env.Client, "ev-a", "ModelCold, NodeCold and ModelFailed", func(e []corev1.Event) bool {
			r := reasons(e)
			return r[readiness.ReasonModelCold] == 1 && r[readiness.ReasonNodeCold] == 1 && r[readiness.ReasonModelFailed] == 1
		})
		for _, e := range evs {
			switch e.Reason {
			case readiness.ReasonModelFailed:
				// The reason is warmd's own words for the failure (state.Reason), on one line.
				if e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, "failed on this node: weights: ") ||
					strings.ContainsAny(e.Message, "\n\r") || strings.Contains(e.Message, "second line") {
					t.Errorf("failure event %s: %q (want a Warning naming the part, one line, no error text)", e.Type, e.Message)
				}
			case readiness.ReasonModelCold, readiness.ReasonNodeCold:
				if e.Type != corev1.EventTypeWarning {
					t.Errorf("%s is %s, want Warning", e.Reason, e.Type)
				}
			}
		}
		if r := reasons(evs); r[readiness.ReasonModelWarm] != 1 || len(evs) != 5 {
			t.Errorf("events after warm, warm, cold, failed:\n%s", eventSummary(evs))
		}
		t.Logf("events on ev-a:\n%s", eventSummary(evs))

		// A restarted warmd finds the labels it wrote: nothing to record.
		w2, _ := newWriter("ev-a", readiness.EventOptions{})
		sync(w2, failed)
		time.Sleep(time.Second) // recording is asynchronous: give a wrong Event time to appear
		if got := nodeEvents(t, env.Client, "ev-a"); len(got) != len(evs) {
			t.Errorf("a restart recorded events:\n%s", eventSummary(got))
		}
	})

	t.Run("repeats fold into a count", func(t *testing.T) {
		createNode(t, env.Client, "ev-b")
		w, _ := newWriter("ev-b", readiness.EventOptions{Burst: 100})
		sync(w, cold)
		for range 3 {
			sync(w, warm)
			sync(w, cold)
		}
		evs := waitEvents(t, env.Client, "ev-b", "counted repeats", func(e []corev1.Event) bool {
			r := reasons(e)
			return r[readiness.ReasonModelWarm] == 3 && r[readiness.ReasonModelCold] == 3
		})
		if len(evs) != 4 { // ModelWarm, NodeWarm, ModelCold, NodeCold, each with count 3
			t.Errorf("want 4 Event objects with counts, got:\n%s", eventSummary(evs))
		}
	})

	t.Run("bounded", func(t *testing.T) {
		createNode(t, env.Client, "ev-c")
		// Distinct messages (different failure reasons) are not folded: only the bound holds them.
		w, _ := newWriter("ev-c", readiness.EventOptions{Burst: 3, Every: time.Hour})
		sync(w, cold)
		for i := range 20 {
			f := failed
			f.Weights.Error = fmt.Sprintf("attempt %d failed", i)
			sync(w, f)
			sync(w, warm)
		}
		time.Sleep(time.Second)
		evs := waitEvents(t, env.Client, "ev-c", "the first 3 events", func(e []corev1.Event) bool { return len(e) >= 3 })
		var total int32
		for _, e := range evs {
			total += max(e.Count, 1)
		}
		if total != 3 {
			t.Errorf("a flapping node recorded %d events, want the burst of 3:\n%s", total, eventSummary(evs))
		}
	})
}
