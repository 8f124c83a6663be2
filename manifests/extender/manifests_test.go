// Package extender_test checks warmd's scheduler-extender manifests: every document decodes strictly
// into its Go type, the scheduler config points at the Service and at the verbs the extender serves,
// the KEDA example queries metrics warmd really exports, and the API server accepts every document.
package extender_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/manifesttest"
	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/extender"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/metrics"
)

type doc = manifesttest.Doc

// load reads dir's kustomization, failing on a YAML file it does not list (never applied).
func load(t *testing.T, dir string) []doc {
	t.Helper()
	for _, f := range manifesttest.Unlisted(t, dir) {
		t.Errorf("%s is not listed in %s/kustomization.yaml, so it is never applied", f, dir)
	}
	return manifesttest.Load(t, dir)
}

func find[T any](t *testing.T, docs []doc, kind, name string) *T {
	t.Helper()
	return manifesttest.Find[T](t, docs, kind, name)
}

// dirs are this directory's kustomizations of built-in kinds (monitoring/ and keda/ need CRDs).
var dirs = []string{".", "second-scheduler"}

func loadAll(t *testing.T) []doc {
	var out []doc
	for _, d := range dirs {
		out = append(out, load(t, d)...)
	}
	return out
}

// TestStrictDecode decodes every Kubernetes document into its Go type, unknown fields being errors.
func TestStrictDecode(t *testing.T) {
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	for _, d := range loadAll(t) {
		if _, _, err := codecs.UniversalDeserializer().Decode(d.Raw, nil, nil); err != nil {
			t.Errorf("%s %s/%s: %v", d.File, d.Obj.GetKind(), d.Obj.GetName(), err)
		}
	}
}

// schedulerConfig decodes a KubeSchedulerConfiguration strictly.
func schedulerConfig(t *testing.T, what string, b []byte) schedv1.KubeSchedulerConfiguration {
	t.Helper()
	var cfg schedv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("%s is not a KubeSchedulerConfiguration: %v", what, err)
	}
	if cfg.Kind != "KubeSchedulerConfiguration" || cfg.APIVersion != "kubescheduler.config.k8s.io/v1" || len(cfg.Extenders) != 1 {
		t.Fatalf("%s = %+v", what, cfg)
	}
	return cfg
}

func profiles(cfg schedv1.KubeSchedulerConfiguration) []string {
	var out []string
	for _, p := range cfg.Profiles {
		out = append(out, *p.SchedulerName)
	}
	return out
}

// TestSchedulerConfigWiring checks both routes' KubeSchedulerConfigurations: they call the Service's
// DNS name and port with the verbs the extender serves, the second scheduler serves only the
// profile the example uses (default-scheduler stays the main scheduler's), the main scheduler's
// config serves both and names its kubeconfig (with --config, --kubeconfig is ignored), and each
// Lease is one its identity may use.
func TestSchedulerConfigWiring(t *testing.T) {
	docs := load(t, ".")
	second := load(t, "second-scheduler")
	cm := find[corev1.ConfigMap](t, second, "ConfigMap", "warmd-scheduler-config")
	secondCfg := schedulerConfig(t, "second-scheduler/scheduler-config.yaml", []byte(cm.Data["config.yaml"]))
	mainRaw, err := os.ReadFile("main-scheduler/kube-scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mainCfg := schedulerConfig(t, "main-scheduler/kube-scheduler-config.yaml", mainRaw)

	svc := find[corev1.Service](t, docs, "Service", "warmd-extender")
	h := extender.New(extender.Config{}, extender.NewIndex(), nil, nil).Handler()
	for name, cfg := range map[string]schedv1.KubeSchedulerConfiguration{"second": secondCfg, "main": mainCfg} {
		ext := cfg.Extenders[0]
		if !ext.NodeCacheCapable || !ext.Ignorable || ext.Weight < 1 || ext.FilterVerb != "filter" || ext.PrioritizeVerb != "prioritize" {
			t.Errorf("%s: extender = %+v", name, ext)
		}
		u, err := url.Parse(ext.URLPrefix)
		if err != nil {
			t.Fatal(err)
		}
		if u.Hostname() != svc.Name+"."+svc.Namespace+".svc" || u.Port() != "8888" || svc.Spec.Ports[0].Port != 8888 {
			t.Errorf("%s: urlPrefix %s does not reach Service %s/%s:%d", name, ext.URLPrefix, svc.Namespace, svc.Name, svc.Spec.Ports[0].Port)
		}
		for _, verb := range []string{ext.FilterVerb, ext.PrioritizeVerb} {
			if _, pattern := h.(interface {
				Handler(*http.Request) (http.Handler, string)
			}).Handler(&http.Request{Method: "POST", URL: &url.URL{Path: "/" + verb}}); pattern == "" {
				t.Errorf("%s: the extender serves no POST /%s", name, verb)
			}
		}
	}
	if !reflect.DeepEqual(secondCfg.Extenders, mainCfg.Extenders) {
		t.Errorf("the two routes call the extender differently:\n%+v\n%+v", secondCfg.Extenders, mainCfg.Extenders)
	}

	// The example's pods are served by either route; default-scheduler only by the main one.
	ex := find[appsv1.Deployment](t, load(t, "../examples"), "Deployment", "vllm-qwen2-5-7b")
	sched := ex.Spec.Template.Spec.SchedulerName
	if p := profiles(secondCfg); !slices.Equal(p, []string{sched}) {
		t.Errorf("second scheduler profiles %v, want exactly the example's %q (never default-scheduler)", p, sched)
	}
	if p := profiles(mainCfg); !slices.Contains(p, "default-scheduler") || !slices.Contains(p, sched) {
		t.Errorf("main scheduler profiles %v, want default-scheduler and %q", p, sched)
	}
	if mainCfg.ClientConnection.Kubeconfig == "" {
		t.Error("main-scheduler config has no clientConnection.kubeconfig: with --config, kube-scheduler ignores --kubeconfig")
	}
	if le := mainCfg.LeaderElection; le.ResourceName != "" && le.ResourceName != "kube-scheduler" {
		t.Errorf("main scheduler lease %q: system:kube-scheduler may only use kube-scheduler", le.ResourceName)
	}

	// The second scheduler's Lease is the one its Role grants; its Deployment reads this config.
	le := secondCfg.LeaderElection
	role := find[rbacv1.Role](t, second, "Role", "warmd-scheduler-lease")
	if le.ResourceNamespace != role.Namespace || !slices.Contains(role.Rules[0].ResourceNames, le.ResourceName) {
		t.Errorf("lease %s/%s, Role %s grants %v", le.ResourceNamespace, le.ResourceName, role.Namespace, role.Rules[0].ResourceNames)
	}
	dep := find[appsv1.Deployment](t, second, "Deployment", "warmd-scheduler")
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != "warmd-scheduler" || pod.Volumes[0].ConfigMap == nil || pod.Volumes[0].ConfigMap.Name != cm.Name ||
		!slices.Contains(pod.Containers[0].Command, "--config="+pod.Containers[0].VolumeMounts[0].MountPath+"/config.yaml") {
		t.Errorf("scheduler Deployment does not run with %s: %+v", cm.Name, pod)
	}

	ed := find[appsv1.Deployment](t, docs, "Deployment", "warmd-extender")
	c := ed.Spec.Template.Spec.Containers[0]
	if c.Args[0] != "extender" || !slices.Contains(c.Args, ":8888") || c.Ports[0].ContainerPort != 8888 || !slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("container = %+v", c)
	}
	if ed.Spec.Template.Spec.ServiceAccountName != "warmd-extender" {
		t.Errorf("serviceAccountName = %q", ed.Spec.Template.Spec.ServiceAccountName)
	}
}

// TestMonitorsAndScalersSelectWhatExists: every ServiceMonitor selects a Service of these manifests
// on a port it has, and the ScaledObject scales the example's Deployment.
func TestMonitorsAndScalersSelectWhatExists(t *testing.T) {
	services := append(load(t, "."), load(t, "..")...)
	for _, d := range append(load(t, "monitoring"), load(t, "../monitoring")...) {
		if d.Obj.GetKind() != "ServiceMonitor" {
			continue
		}
		sel, _, _ := unstructured.NestedStringMap(d.Obj.Object, "spec", "selector", "matchLabels")
		ns, _, _ := unstructured.NestedStringSlice(d.Obj.Object, "spec", "namespaceSelector", "matchNames")
		eps, _, _ := unstructured.NestedSlice(d.Obj.Object, "spec", "endpoints")
		matched := false
		for _, s := range services {
			if s.Obj.GetKind() != "Service" || !slices.Contains(ns, s.Obj.GetNamespace()) {
				continue
			}
			labels := s.Obj.GetLabels()
			ok := len(sel) > 0
			for k, v := range sel {
				ok = ok && labels[k] == v
			}
			if !ok {
				continue
			}
			matched = true
			ports, _, _ := unstructured.NestedSlice(s.Obj.Object, "spec", "ports")
			for _, ep := range eps {
				want := ep.(map[string]any)["port"]
				if !slices.ContainsFunc(ports, func(p any) bool { return p.(map[string]any)["name"] == want }) {
					t.Errorf("ServiceMonitor %s scrapes port %v, Service %s has %v", d.Obj.GetName(), want, s.Obj.GetName(), ports)
				}
			}
		}
		if !matched {
			t.Errorf("ServiceMonitor %s (%s) selects no Service", d.Obj.GetName(), d.File)
		}
	}
	examples := load(t, "../examples")
	for _, so := range load(t, "keda") {
		ref, _, _ := unstructured.NestedStringMap(so.Obj.Object, "spec", "scaleTargetRef")
		if !slices.ContainsFunc(examples, func(d doc) bool {
			return d.Obj.GetKind() == ref["kind"] && d.Obj.GetName() == ref["name"] && d.Obj.GetNamespace() == so.Obj.GetNamespace()
		}) {
			t.Errorf("ScaledObject %s scales %s %s/%s, which manifests/examples does not create", so.Obj.GetName(), ref["kind"], so.Obj.GetNamespace(), ref["name"])
		}
	}
}

// TestKEDAQueriesUseExportedMetrics keeps the example's queries on metric names warmd registers.
func TestKEDAQueriesUseExportedMetrics(t *testing.T) {
	docs := load(t, "keda")
	so := docs[0].Obj
	if so.GetKind() != "ScaledObject" || so.GetAPIVersion() != "keda.sh/v1alpha1" {
		t.Fatalf("keda/scaledobject.yaml holds %s %s", so.GetAPIVersion(), so.GetKind())
	}
	reg := prometheus.NewRegistry()
	metrics.NewExtender(reg, extender.NewIndex(), extender.NewReplicas(0, nil))
	descs := make(chan *prometheus.Desc, 16)
	reg.Describe(descs)
	close(descs)
	var names []string
	for d := range descs {
		names = append(names, d.String())
	}
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	if len(triggers) == 0 {
		t.Fatal("no triggers")
	}
	for _, want := range []string{"warmd_warm_nodes", "warmd_cluster_fastest_ready_seconds"} {
		found := false
		for _, tr := range triggers {
			q, _, _ := unstructured.NestedString(tr.(map[string]any), "metadata", "query")
			found = found || strings.Contains(q, want)
		}
		registered := slices.ContainsFunc(names, func(s string) bool { return strings.Contains(s, `"`+want+`"`) })
		if !found || !registered {
			t.Errorf("%s: used in a query %v, registered by the extender %v", want, found, registered)
		}
	}
}

// applyAll server-side-applies every document to a real kube-apiserver (after the warmd namespace
// that manifests/ creates) and returns the server.
func applyAll(t *testing.T) *kubeenv.Env {
	t.Helper()
	env := kubeenv.Start(t)
	ctx := context.Background()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "warmd"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Clientset.Discovery()))
	for _, d := range loadAll(t) {
		gvk := d.Obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", d.File, err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			r = dyn.Resource(m.Resource).Namespace(d.Obj.GetNamespace())
		}
		if _, err := r.Apply(ctx, d.Obj.GetName(), d.Obj, metav1.ApplyOptions{FieldManager: "warmd-extender-manifests-test", Force: true}); err != nil {
			t.Fatalf("apply %s %s/%s: %v", d.File, d.Obj.GetKind(), d.Obj.GetName(), err)
		}
	}
	return env
}

// TestApplyAndRBAC applies the manifests to a real API server, then asks it what the two identities
// may do: the extender elects its leader with its own Lease (run for real with its identity) and may
// touch no other Lease; the second scheduler may bind pods and use its Lease, not the main one's.
func TestApplyAndRBAC(t *testing.T) {
	env := applyAll(t)
	ctx := context.Background()
	can := func(sa, verb, group, resource, ns, name string) bool {
		t.Helper()
		r, err := env.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:warmd:" + sa,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:warmd", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Namespace: ns, Name: name},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	for _, tc := range []struct {
		sa, verb, group, resource, ns, name string
		want                                bool
	}{
		{"warmd-extender", "update", "coordination.k8s.io", "leases", "warmd", "warmd-extender", true},
		{"warmd-extender", "update", "coordination.k8s.io", "leases", "warmd", "warmd-scheduler", false},
		{"warmd-extender", "update", "coordination.k8s.io", "leases", "kube-system", "kube-scheduler", false},
		{"warmd-extender", "patch", "", "nodes", "", "n1", false},
		{"warmd-scheduler", "create", "", "pods/binding", "default", "p", true},
		{"warmd-scheduler", "update", "coordination.k8s.io", "leases", "warmd", "warmd-scheduler", true},
		{"warmd-scheduler", "get", "", "configmaps", "kube-system", "extension-apiserver-authentication", true},
		{"warmd-scheduler", "update", "coordination.k8s.io", "leases", "warmd", "warmd-extender", false},
	} {
		if got := can(tc.sa, tc.verb, tc.group, tc.resource, tc.ns, tc.name); got != tc.want {
			t.Errorf("%s %s %s %s/%s: allowed %v, want %v", tc.sa, tc.verb, tc.resource, tc.ns, tc.name, got, tc.want)
		}
	}

	// The extender's election, as its ServiceAccount.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:warmd:warmd-extender",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:warmd", "system:authenticated"}}
	cs, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l := extender.NewLeader(true)
	done := make(chan error, 1)
	go func() {
		done <- l.Run(ectx, cs, extender.LeaseOptions{Namespace: "warmd", Name: "warmd-extender", Identity: "pod-a"}, slog.New(slog.DiscardHandler))
	}()
	for !l.IsLeader() && ectx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	became := l.IsLeader()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("election: %v", err)
	}
	if !became {
		t.Fatal("the extender's ServiceAccount never became leader with the shipped RBAC")
	}
}
