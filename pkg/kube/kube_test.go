package kube_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/kube"
)

// The apply body is client-go's: the same JSON its apply configurations marshal to, so the API
// server sees the request client-go would send.
func TestNodeApplyMarshalsAsClientGoDoes(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	for name, tc := range map[string]struct {
		ours   *kube.NodeApply
		theirs *corev1ac.NodeApplyConfiguration
	}{
		"labels and annotations": {
			kube.NewNodeApply("gpu-1").WithLabels(map[string]string{"warmd.io/warm": "true"}).WithAnnotations(map[string]string{"warmd.io/predicted": "[]"}),
			corev1ac.Node("gpu-1").WithLabels(map[string]string{"warmd.io/warm": "true"}).WithAnnotations(map[string]string{"warmd.io/predicted": "[]"}),
		},
		"nothing (every key given up)": {
			kube.NewNodeApply("gpu-1").WithLabels(map[string]string{}).WithAnnotations(nil),
			corev1ac.Node("gpu-1").WithLabels(map[string]string{}).WithAnnotations(nil),
		},
		"a condition": {
			kube.NewNodeApply("gpu-1").WithConditions(corev1.NodeCondition{Type: "WarmdReady", Status: corev1.ConditionTrue,
				Reason: "Warm", Message: "1 of 1", LastHeartbeatTime: now, LastTransitionTime: now}),
			corev1ac.Node("gpu-1").WithStatus(corev1ac.NodeStatus().WithConditions(corev1ac.NodeCondition().WithType("WarmdReady").
				WithStatus(corev1.ConditionTrue).WithReason("Warm").WithMessage("1 of 1").WithLastHeartbeatTime(now).WithLastTransitionTime(now))),
		},
	} {
		t.Run(name, func(t *testing.T) {
			a, _ := json.Marshal(tc.ours)
			b, _ := json.Marshal(tc.theirs)
			var x, y any
			if err := json.Unmarshal(a, &x); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &y); err != nil {
				t.Fatal(err)
			}
			if xs, ys := mustJSON(t, x), mustJSON(t, y); xs != ys {
				t.Errorf("apply body\n ours   %s\n client-go's %s", xs, ys)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Against a real API server: server-side apply through the narrow client owns and gives up keys
// as client-go's does, the status apply merges one condition, the informers list and watch what
// their tweak selects, and the event sink writes into the object's namespace.
func TestAgainstTheAPIServer(t *testing.T) {
	env := kubeenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := kube.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	nodes := c.CoreV1().Nodes()
	for _, n := range []string{"gpu-1", "gpu-2"} {
		if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"team": "ml"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	opts := metav1.ApplyOptions{FieldManager: "warmd-test"}

	t.Run("apply owns and gives up keys", func(t *testing.T) {
		if _, err := nodes.Apply(ctx, kube.NewNodeApply("gpu-1").WithLabels(map[string]string{"a": "1", "b": "2"}), opts); err != nil {
			t.Fatal(err)
		}
		n, err := nodes.Apply(ctx, kube.NewNodeApply("gpu-1").WithLabels(map[string]string{"a": "1"}), opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, has := n.Labels["b"]; has || n.Labels["a"] != "1" || n.Labels["team"] != "ml" {
			t.Errorf("labels after giving up b: %v; want a=1 and team=ml kept, b gone", n.Labels)
		}
		n, err = nodes.Apply(ctx, kube.NewNodeApply("gpu-1"), opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, has := n.Labels["a"]; has || n.Labels["team"] != "ml" {
			t.Errorf("labels after applying none: %v; want only team=ml", n.Labels)
		}
	})

	t.Run("apply status merges one condition", func(t *testing.T) {
		now := metav1.Now()
		n, err := nodes.ApplyStatus(ctx, kube.NewNodeApply("gpu-1").WithConditions(corev1.NodeCondition{Type: "WarmdReady", Status: corev1.ConditionFalse,
			Reason: "Cold", LastHeartbeatTime: now, LastTransitionTime: now}), opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Reason != "Cold" || n.Status.Conditions[0].LastHeartbeatTime.IsZero() {
			t.Errorf("conditions %+v, want the one WarmdReady applied", n.Status.Conditions)
		}
	})

	t.Run("informers list and watch their selection", func(t *testing.T) {
		inf := kube.NodeInformer(c, 0, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", "gpu-2").String()
		})
		ictx, stop := context.WithCancel(ctx)
		defer stop()
		go inf.Run(ictx.Done())
		if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
			t.Fatal("node informer did not sync")
		}
		if keys := inf.GetStore().ListKeys(); len(keys) != 1 || keys[0] != "gpu-2" {
			t.Fatalf("node informer holds %v, want [gpu-2]", keys)
		}
		if _, err := nodes.Apply(ctx, kube.NewNodeApply("gpu-2").WithLabels(map[string]string{"seen": "yes"}), opts); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the watch to bring the label", func() bool {
			o, ok, _ := inf.GetStore().GetByKey("gpu-2")
			return ok && o.(*corev1.Node).Labels["seen"] == "yes"
		})

		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vllm"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "vllm"},
			Spec: corev1.PodSpec{NodeName: "gpu-2", Containers: []corev1.Container{{Name: "c", Image: "vllm/vllm-openai:v0.11.0"}}}}
		if _, err := c.CoreV1().Pods("vllm").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pinf := kube.PodInformer(c, 0, nil)
		go pinf.Run(ictx.Done())
		if !cache.WaitForCacheSync(ictx.Done(), pinf.HasSynced) {
			t.Fatal("pod informer did not sync")
		}
		if got, err := pinf.GetIndexer().ByIndex(cache.NamespaceIndex, "vllm"); err != nil || len(got) != 1 {
			t.Errorf("pods indexed under vllm: %d, %v; want the one", len(got), err)
		}
	})

	t.Run("the event sink writes into the object's namespace", func(t *testing.T) {
		bc := record.NewBroadcaster()
		defer bc.Shutdown()
		bc.StartRecordingToSink(kube.EventSink{C: c})
		rec := bc.NewRecorder(kube.Scheme, corev1.EventSource{Component: "warmd"})
		node, err := nodes.Get(ctx, "gpu-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec.Event(node, corev1.EventTypeNormal, "Warm", "every model is warm")
		waitFor(t, "the event", func() bool {
			l, err := c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 1 && l.Items[0].Reason == "Warm" && l.Items[0].InvolvedObject.Name == "gpu-1"
		})
	})
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Requests name warmd and its build, for the API server's audit log.
func TestUserAgentNamesWarmd(t *testing.T) {
	if ua := kube.UserAgent(); !strings.HasPrefix(ua, "warmd/") || !strings.Contains(ua, runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("user agent %q, want warmd/<version> (<os>/<arch>)", ua)
	}
}
