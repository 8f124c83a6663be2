package kube_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/tools/cache"

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
// their tweak selects, and every verb of the typed clients does what client-go's does.
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

	t.Run("every verb of the typed clients", func(t *testing.T) {
		leases := c.CoordinationV1().Leases(metav1.NamespaceDefault)
		holder := "a"
		l, err := leases.Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "verbs"}, Spec: coordv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=verbs", ResourceVersion: l.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		holder = "b"
		l.Spec.HolderIdentity = &holder
		if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil || *l.Spec.HolderIdentity != "b" {
			t.Fatalf("update: %v", err)
		}
		if l, err = leases.Patch(ctx, "verbs", types.MergePatchType, []byte(`{"spec":{"holderIdentity":"c"}}`), metav1.PatchOptions{}); err != nil || *l.Spec.HolderIdentity != "c" {
			t.Fatalf("patch: %v", err)
		}
		if got, err := leases.Get(ctx, "verbs", metav1.GetOptions{}); err != nil || *got.Spec.HolderIdentity != "c" || got.ResourceVersion != l.ResourceVersion {
			t.Fatalf("get after patch: %v, %v", got, err)
		}
		if list, err := leases.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 1 {
			t.Fatalf("list: %v, %v", list, err)
		}
		for _, want := range []string{"b", "c"} {
			select {
			case ev := <-w.ResultChan():
				if got, ok := ev.Object.(*coordv1.Lease); !ok || ev.Type != watch.Modified || *got.Spec.HolderIdentity != want {
					t.Fatalf("watch: %s %T, want the lease modified to holder %s", ev.Type, ev.Object, want)
				}
			case <-ctx.Done():
				t.Fatal("watch saw nothing")
			}
		}
		if err := leases.Delete(ctx, "verbs", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := leases.Get(ctx, "verbs", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("get after delete: %v, want NotFound", err)
		}
		n, err := nodes.Get(ctx, "gpu-2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
		if n, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil || n.Status.Capacity.Cpu().Value() != 8 {
			t.Fatalf("update status: %v", err)
		}
		review, err := c.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: "not-a-token"}}, metav1.CreateOptions{})
		if err != nil || review.Status.Authenticated {
			t.Fatalf("token review of a made-up token: %+v, %v; want an answer, not authenticated", review.Status, err)
		}
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
