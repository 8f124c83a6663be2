package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"warmd.io/warmd/internal/testenv/cluster"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/predict"
)

// The second Node of the prioritize step: registered with the API server and kept Ready by the test
// (its Lease in kube-node-lease and its Ready condition renewed), so kube-scheduler and the
// controller-manager treat it as a node; no kubelet runs behind it, so a pod bound there never starts.
// Its taint keeps warmd's DaemonSet (and anything else) off it; the step's pods tolerate it.
const (
	secondNode  = "warmd-e2e-second"
	secondTaint = "warmd.io/e2e-second"
)

// schedulerRanks registers a second Node so that two nodes fit a vLLM pod: only then does
// kube-scheduler ask the extender's prioritize (with one feasible node it binds without scoring).
// The second Node's predicted time-to-ready for the model is set first below the warm node's, then
// above it; a pod without the example's node affinity (so that only the extender knows which node is
// warm) must follow the ranking both times, while the default scorers see the second Node as the
// emptier one each time.
func (e *e2e) schedulerRanks(ctx context.Context, t *testing.T) {
	e.extenderReady(ctx, t)
	m := e.w.qwen7b.name
	real, err := e.node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	preds, err := predict.ParseAnnotation(real.Annotations[nodelabels.AnnotationPredicted])
	warmSecs, ok := preds[m]
	if err != nil || !ok || warmSecs <= 0 {
		t.Fatalf("the warm node predicts %v for %s (%v): the ranking needs its prediction", preds, m, err)
	}
	stop := e.registerSecondNode(ctx, t, real)
	defer stop()

	for i, round := range []struct {
		secs float64
		want string
	}{
		{warmSecs / 4, secondNode}, // the second Node predicts faster: the extender ranks it first
		{warmSecs * 4, e.c.Node},   // slower: the warm node first
	} {
		e.setPrediction(ctx, t, m, round.secs)
		before := e.extenderVerb(ctx, t, "prioritize")
		name := fmt.Sprintf("vllm-ranked-%d", i+1)
		got := e.bindPod(ctx, t, name)
		after := e.extenderVerb(ctx, t, "prioritize")
		t.Logf("round %d: second Node predicts %.1fs, the warm node %.1fs: pod %s bound to %s (prioritize answered %v times)",
			i+1, round.secs, warmSecs, name, got, after-before)
		if after <= before {
			t.Errorf("round %d: kube-scheduler placed %s without asking prioritize", i+1, name)
		}
		if got != round.want {
			t.Errorf("round %d: pod %s bound to %s, want %s (the extender's first)", i+1, name, got, round.want)
		}
		e.forceDelete(ctx, t, name)
	}
}

// registerSecondNode creates the second Node like the warm one (capacity, eight GPUs), Ready, and
// keeps it Ready until the returned stop, which deletes it.
func (e *e2e) registerSecondNode(ctx context.Context, t *testing.T, like *corev1.Node) (stop func()) {
	t.Helper()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("8"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: secondNode, Labels: map[string]string{
			corev1.LabelHostname: secondNode, corev1.LabelOSStable: "linux", corev1.LabelArchStable: like.Labels[corev1.LabelArchStable],
			nodelabels.LabelSKU: like.Labels[nodelabels.LabelSKU],
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: secondTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
	}
	cs := e.c.Clientset
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register %s: %v", secondNode, err)
	}
	since := metav1.Now() // the Ready condition's transition time, kept
	beat := func() error {
		now := metav1.Now()
		// A strategic merge patch of the status, as a kubelet's heartbeat: no resourceVersion to
		// race the controller-manager's own writes to this Node.
		st := map[string]any{"status": corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "kept Ready by the cluster e2e (no kubelet)", LastHeartbeatTime: now, LastTransitionTime: since}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}}}}
		body, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, secondNode, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
			return err
		}
		leases := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
		l, err := leases.Get(ctx, secondNode, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: secondNode},
				Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To(secondNode), LeaseDurationSeconds: ptr.To[int32](40),
					RenewTime: &metav1.MicroTime{Time: now.Time}}}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: now.Time}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
	if err := beat(); err != nil {
		t.Fatalf("make %s Ready: %v", secondNode, err)
	}
	// The API server's NodeTaint admission gives a new Node node.kubernetes.io/not-ready; the
	// controller-manager lifts it once the Node is Ready.
	if err := cluster.Eventually(ctx, time.Minute, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		cur, err := cs.CoreV1().Nodes().Get(ctx, secondNode, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(cur.Spec.Taints) != 1 {
			return false, fmt.Errorf("%s has taints %v", secondNode, cur.Spec.Taints)
		}
		return true, nil
	}); err != nil {
		t.Fatalf("second Node schedulable: %v", err)
	}
	bctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-bctx.Done():
				return
			case <-tick.C:
				if err := beat(); err != nil && bctx.Err() == nil {
					t.Logf("heartbeat of %s: %v", secondNode, err)
				}
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		if err := cs.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), secondNode, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s: %v", secondNode, err)
		}
		_ = cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(context.WithoutCancel(ctx), secondNode, metav1.DeleteOptions{})
	}
}

// setPrediction gives the second Node a warm label and a predicted time-to-ready for model m, as
// warmd would publish them, and waits until the extender's Node index can have seen it.
func (e *e2e) setPrediction(ctx context.Context, t *testing.T, m string, secs float64) {
	t.Helper()
	ann, err := predict.Annotation([]predict.Prediction{{Model: m, Seconds: secs}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, nodelabels.AnnotationPredicted, ann)
	if _, err := e.c.Clientset.CoreV1().Nodes().Patch(ctx, secondNode, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The extender's informer sees a Node change within milliseconds on this loopback cluster; two
	// seconds cover a busy machine. A late one shows as a wrong placement, never a pass.
	time.Sleep(2 * time.Second)
}

// bindPod creates a pod from the example Deployment's template, without its node affinity, that
// tolerates the second Node's taint, and returns the node kube-scheduler binds it to.
func (e *e2e) bindPod(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	d := e.vllmDeployment(t)
	spec := d.Spec.Template.Spec
	spec.Affinity = nil
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: secondTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vllmNS, Annotations: d.Spec.Template.Annotations,
		Labels: map[string]string{"app.kubernetes.io/name": name}}, Spec: spec}
	if _, err := e.c.Clientset.CoreV1().Pods(vllmNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node string
	if err := cluster.Eventually(ctx, time.Minute, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		got, err := e.c.Clientset.CoreV1().Pods(vllmNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = got.Spec.NodeName
		return node != "", fmt.Errorf("pod %s not bound yet", name)
	}); err != nil {
		t.Fatal(err)
	}
	return node
}

// forceDelete removes a pod at once (one bound to the second Node has no kubelet to confirm it).
func (e *e2e) forceDelete(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	err := e.c.Clientset.CoreV1().Pods(vllmNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete pod %s: %v", name, err)
	}
}

// extenderVerb sums warmd_extender_requests_total{verb,result="ok"} over the extender pods (every
// verb when verb is empty).
func (e *e2e) extenderVerb(ctx context.Context, t *testing.T, verb string) float64 {
	t.Helper()
	l, err := e.c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=warmd-extender"})
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, p := range l.Items {
		if p.Status.PodIP == "" {
			continue
		}
		code, body, err := httpGetInNode(ctx, e.c, fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, e.extenderMetricsPort()))
		if err != nil || code != 200 {
			t.Fatalf("extender %s /metrics: %d %v", p.Name, code, err)
		}
		labels := []string{`result="ok"`}
		if verb != "" {
			labels = append(labels, fmt.Sprintf("verb=%q", verb))
		}
		v, _ := metricSum(body, "warmd_extender_requests_total", labels...)
		sum += v
	}
	return sum
}
