package manifests_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"warmd.io/warmd/internal/manifesttest"
	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/readiness"
)

const (
	nodeA = "warmd-node-a"
	nodeB = "warmd-node-b"
)

// tokenClient returns a client authenticated as warmd's ServiceAccount with a token from the
// TokenRequest API, bound to pod when pod is not nil (as the kubelet's projected token is): client-go's
// whole clientset, and warmd's own (pkg/kube) with the same token.
func tokenClient(t *testing.T, env *kubeenv.Env, pod *corev1.Pod) (kubernetes.Interface, kube.Interface) {
	t.Helper()
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != nil {
		tr.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tok, err := env.Clientset.CoreV1().ServiceAccounts("warmd").CreateToken(context.Background(), "warmd", tr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tok.Status.Token
	cfg.QPS, cfg.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, kc
}

// TestAdmissionPolicy proves on a real API server (RBAC + ValidatingAdmissionPolicy, as in a
// cluster) that warmd's pod-bound token can write warmd's keys on its own Node and nothing else.
func TestAdmissionPolicy(t *testing.T) {
	env := kubeenv.Start(t)
	ctx := context.Background()
	a := newApplier(t, env)
	for _, d := range manifesttest.Load(t, ".") {
		switch d.Obj.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if err := a.apply(ctx, d.Obj); err != nil {
				t.Fatalf("apply %s: %v", d.File, err)
			}
		}
	}
	for _, n := range []string{nodeA, nodeB} {
		_, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"team": "ml"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	pod, err := env.Client.CoreV1().Pods("warmd").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "warmd-a"},
		Spec: corev1.PodSpec{
			NodeName: nodeA, ServiceAccountName: "warmd",
			Containers: []corev1.Container{{Name: "warmd", Image: "ghcr.io/warmd/warmd:v0.1.0"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs, warmdClient := tokenClient(t, env, pod)

	// What the API server makes of the token: ServiceAccountTokenPodNodeInfo puts the node in extra.
	ssr, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ui := ssr.Status.UserInfo
	t.Logf("pod-bound token: user %s, extra %v", ui.Username, ui.Extra)
	if got := ui.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != nodeA {
		t.Fatalf("token's node-name extra = %v, want [%s]", got, nodeA)
	}

	// Force, so a key another manager owns reaches admission instead of stopping at an apply conflict.
	applyLabels := func(c kubernetes.Interface, node string, l map[string]string) error {
		_, err := c.CoreV1().Nodes().Apply(ctx, corev1ac.Node(node).WithLabels(l), metav1.ApplyOptions{FieldManager: readiness.FieldManager, Force: true})
		return err
	}
	merge := func(c kubernetes.Interface, node string, patch any) error {
		b, _ := json.Marshal(patch)
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{FieldManager: readiness.FieldManager})
		return err
	}
	taints := func(extra ...corev1.Taint) map[string]any {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeA, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
			"spec": map[string]any{"taints": append(n.Spec.Taints, extra...)}}
	}
	condition := func(c kubernetes.Interface, typ string) error {
		_, err := c.CoreV1().Nodes().ApplyStatus(ctx, corev1ac.Node(nodeA).WithStatus(corev1ac.NodeStatus().WithConditions(
			corev1ac.NodeCondition().WithType(corev1.NodeConditionType(typ)).WithStatus(corev1.ConditionTrue).
				WithReason("Test").WithLastHeartbeatTime(metav1.Now()).WithLastTransitionTime(metav1.Now()))),
			metav1.ApplyOptions{FieldManager: readiness.FieldManager})
		return err
	}

	// A new policy takes effect once the API server's policy informer has it: wait for a refusal.
	deadline := time.Now().Add(60 * time.Second)
	for applyLabels(cs, nodeB, map[string]string{"warmd.io/warm": "true"}) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the admission policy never took effect")
		}
		if err := merge(env.Clientset, nodeB, map[string]any{"metadata": map[string]any{"labels": map[string]any{"warmd.io/warm": nil}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	noNode, _ := tokenClient(t, env, nil)
	tests := []struct {
		name  string
		do    func() error
		allow bool
		msg   string // part of the refusal
	}{
		{"own node, warmd labels", func() error {
			return applyLabels(cs, nodeA, map[string]string{"warmd.io/warm": "false", "models.warmd.io/Qwen--Qwen2.5-7B-Instruct": "image"})
		}, true, ""},
		{"own node, warmd annotation", func() error {
			return merge(cs, nodeA, map[string]any{"metadata": map[string]any{"annotations": map[string]string{"warmd.io/status": `{"v":1}`}}})
		}, true, ""},
		{"own node, startup taint", func() error {
			return merge(cs, nodeA, taints(corev1.Taint{Key: nodelabels.TaintCold, Value: "true", Effect: corev1.TaintEffectNoSchedule}))
		}, true, ""},
		{"own node, WarmdReady condition", func() error { return condition(cs, nodelabels.ConditionType) }, true, ""},
		{"other node", func() error { return applyLabels(cs, nodeB, map[string]string{"warmd.io/warm": "true"}) }, false,
			"warmd running on node warmd-node-a may not modify Node warmd-node-b"},
		{"foreign label", func() error { return applyLabels(cs, nodeA, map[string]string{"team": "other"}) }, false,
			"may only change labels under warmd.io/ and models.warmd.io/, not: team"},
		{"removing a foreign label", func() error {
			return merge(cs, nodeA, map[string]any{"metadata": map[string]any{"labels": map[string]any{"team": nil}}})
		}, false, "not: team"},
		{"foreign annotation", func() error {
			return merge(cs, nodeA, map[string]any{"metadata": map[string]any{"annotations": map[string]string{"example.com/x": "1"}}})
		}, false, "may only change annotations under warmd.io/ and models.warmd.io/, not: example.com/x"},
		{"another taint", func() error {
			return merge(cs, nodeA, taints(corev1.Taint{Key: "example.com/evil", Effect: corev1.TaintEffectNoExecute}))
		}, false, "may only add or remove its own taint warmd.io/cold"},
		{"unschedulable", func() error { return merge(cs, nodeA, map[string]any{"spec": map[string]any{"unschedulable": true}}) }, false,
			"may not change Node spec fields other than its warmd.io/cold taint"},
		{"providerID", func() error {
			return merge(cs, nodeA, map[string]any{"spec": map[string]any{"providerID": "aws:///x"}})
		}, false,
			"may not change Node spec fields"},
		{"another condition", func() error { return condition(cs, "Ready") }, false, "may only change its own WarmdReady condition"},
		{"token not bound to a pod", func() error { return applyLabels(noNode, nodeA, map[string]string{"warmd.io/warm": "true"}) }, false,
			"no node name in warmd's credentials"},
		{"delete own node (RBAC)", func() error { return cs.CoreV1().Nodes().Delete(ctx, nodeA, metav1.DeleteOptions{}) }, false,
			"cannot delete resource \"nodes\""},
		{"create a node (RBAC)", func() error {
			_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "warmd-node-c"}}, metav1.CreateOptions{})
			return err
		}, false, "cannot create resource \"nodes\""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			switch {
			case tc.allow && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.allow && err == nil:
				t.Fatal("allowed, want refused")
			case !tc.allow && !strings.Contains(err.Error(), tc.msg):
				t.Fatalf("refused with %q, want it to say %q", err, tc.msg)
			case !tc.allow:
				if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
					t.Errorf("refusal is %T, not Forbidden/Invalid", err)
				}
				t.Logf("refused: %v", err)
			}
		})
	}

	// The real writer, with the same token, does all its work within the policy.
	w := readiness.NewWriter(readiness.WriterOptions{NodeName: nodeA, Client: warmdClient, StartupTaint: true})
	cold := readiness.ModelInput{Name: "Qwen/Qwen2.5-7B-Instruct", Wants: true, Weights: readiness.WeightsFacts{Revision: "main"}}
	warm := cold
	warm.Weights.VerifiedRevision = "main"
	for _, m := range []readiness.ModelInput{cold, warm} {
		w.SetInput(readiness.Input{SKU: "h100", Models: []readiness.ModelInput{m}})
		if _, err := w.Sync(ctx); err != nil {
			t.Fatalf("writer through the policy: %v", err)
		}
	}
	n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels["warmd.io/warm"] != "true" || n.Labels["team"] != "ml" || len(n.Spec.Taints) == 0 {
		t.Errorf("node after the writer: labels %v taints %v", n.Labels, n.Spec.Taints)
	}
}
