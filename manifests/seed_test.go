package manifests_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/peer/seed"
)

// TestChartSeedLeases applies the chart with peers on to a real API server (RBAC and the admission
// policy, as in a cluster) and runs the seed Lease as warmd's pod-bound token: it may create, renew and
// give up the seed Lease of a model as its own node, and nothing else — not name another node as the
// holder, not write another Lease of the namespace (the extender's leader Lease), not delete, not
// write Leases in another namespace. With peers off none of it renders.
func TestChartSeedLeases(t *testing.T) {
	env := kubeenv.Start(t)
	ctx := context.Background()
	a := newApplier(t, env)
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "warmd"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err) // the release namespace (helm install --create-namespace)
	}
	for _, d := range render(t, "peers.enabled=true") {
		switch d.Obj.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if err := a.apply(ctx, d.Obj); err != nil {
				t.Fatalf("apply %s %s: %v", d.Obj.GetKind(), d.Obj.GetName(), err)
			}
		}
	}
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeA}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := env.Client.CoreV1().Pods("warmd").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "warmd-a"},
		Spec: corev1.PodSpec{NodeName: nodeA, ServiceAccountName: "warmd",
			Containers: []corev1.Container{{Name: "warmd", Image: "ghcr.io/warmd/warmd:v0.1.0"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, cs := tokenClient(t, env, pod)
	leases := cs.CoordinationV1().Leases("warmd")

	// A new policy takes effect once the API server's policy informer has it: wait for a refusal.
	other := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "warmd-extender", Labels: map[string]string{seed.LabelPart: "warmd"}},
		Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To(nodeA)}}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := leases.Create(ctx, other, metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), "may only write its seed Leases") {
			break
		}
		if err == nil {
			if derr := env.Client.CoordinationV1().Leases("warmd").Delete(ctx, other.Name, metav1.DeleteOptions{}); derr != nil {
				t.Fatal(derr)
			}
		} else if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			t.Fatalf("creating the extender's Lease as warmd: %v; want the seed policy's refusal", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the seed Lease policy never refused another Lease in 60s")
		}
	}

	own := seed.New(cs, "warmd", "acme/Llama-70B", "r1", nodeA, time.Minute)
	if held, holder, err := own.Acquire(ctx); err != nil || !held {
		t.Fatalf("warmd takes its model's seed Lease as its node: held %v (holder %q), %v", held, holder, err)
	}
	if held, _, err := own.Acquire(ctx); err != nil || !held {
		t.Fatalf("warmd renews its seed Lease: held %v, %v", held, err)
	}
	if err := own.Release(ctx); err != nil {
		t.Fatalf("warmd gives its seed Lease up: %v", err)
	}
	name := seed.Name("acme/Llama-70B", "r1")
	if l, err := env.Client.CoordinationV1().Leases("warmd").Get(ctx, name, metav1.GetOptions{}); err != nil || l.Spec.HolderIdentity != nil {
		t.Fatalf("released Lease: %+v, %v; want no holder", l, err)
	}

	refused := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want a refusal saying %q", what, err, want)
		}
	}
	_, _, err = seed.New(cs, "warmd", "acme/Llama-70B", "r1", nodeB, time.Minute).Acquire(ctx)
	refused("naming another node the holder", err, "may only name itself as a seed Lease holder")
	_, _, err = seed.New(cs, "warmd", "acme/other", "r1", nodeB, time.Minute).Acquire(ctx)
	refused("creating a seed Lease held by another node", err, "may only name itself as a seed Lease holder")
	if err := leases.Delete(ctx, name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting a seed Lease: %v; want forbidden (RBAC grants no delete, and the policy refuses one)", err)
	}
	_, err = cs.CoordinationV1().Leases("default").Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "warmd-seed-x"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("creating a Lease in another namespace: %v; want forbidden by RBAC", err)
	}
	l, err := env.Client.CoordinationV1().Leases("warmd").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Labels = nil
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	refused("dropping the part-of label", err, "app.kubernetes.io/part-of=warmd")

	for _, d := range render(t) {
		if (d.Obj.GetKind() == "Role" && d.Obj.GetName() == "warmd-seed") || d.Obj.GetName() == "warmd-seed-leases" {
			t.Errorf("the default chart (peers off) renders %s %s", d.Obj.GetKind(), d.Obj.GetName())
		}
	}
}
