package manifests_test

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/manifesttest"
	"warmd.io/warmd/internal/testenv/kubeenv"
)

const testManager = "warmd-manifests-test"

// applier server-side-applies unstructured documents, resolving kinds through discovery.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(t *testing.T, env *kubeenv.Env) *applier {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Clientset.Discovery()))}
}

func (a *applier) apply(ctx context.Context, u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		a.mapper.Reset()
		if m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return err
		}
	}
	var r dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		r = a.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	_, err = r.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: testManager, Force: true})
	return err
}

// TestApplyAll server-side-applies every manifest, in kustomization order, to a real kube-apiserver
// and expects each to be accepted. The ServiceMonitor and PrometheusRule need prometheus-operator's
// CRDs, which a bare API server lacks: minimal stand-ins (testdata/*-crd.yaml) are installed first.
func TestApplyAll(t *testing.T) {
	env := kubeenv.Start(t)
	ctx := context.Background()
	a := newApplier(t, env)

	for _, f := range []string{"testdata/servicemonitor-crd.yaml", "testdata/prometheusrule-crd.yaml"} {
		if err := a.apply(ctx, readObject(t, f)); err != nil {
			t.Fatalf("install %s: %v", f, err)
		}
	}
	for _, d := range all(t) {
		t.Run(d.File+"/"+d.Obj.GetKind()+"/"+d.Obj.GetName(), func(t *testing.T) {
			err := a.apply(ctx, d.Obj)
			// A CRD's kind is served a moment after it is created: retry for a bounded while.
			for i := 0; err != nil && meta.IsNoMatchError(err) && i < 100; i++ {
				time.Sleep(100 * time.Millisecond)
				err = a.apply(ctx, d.Obj)
			}
			if err != nil {
				t.Fatalf("server-side apply rejected: %v", err)
			}
		})
	}
	// Applying again is a no-op for the server: nothing of ours is invalid on re-apply either.
	for _, d := range manifesttest.Load(t, ".") {
		if err := a.apply(ctx, d.Obj); err != nil {
			t.Errorf("re-apply %s %s: %v", d.Obj.GetKind(), d.Obj.GetName(), err)
		}
	}
	// status.typeChecking of the policy is filled by kube-controller-manager, which envtest does not
	// run; admission_test.go instead drives every validation of the policy to its refusal message.
}

func readObject(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
	}
	return u
}
