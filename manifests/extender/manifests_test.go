// Package extender_test checks warmd's scheduler-extender manifests: every document decodes strictly
// into its Go type, the scheduler config points at the Service and at the verbs the extender serves,
// the KEDA example queries metrics warmd really exports, and the API server accepts every document.
package extender_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/restmapper"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/extender"
	"warmd.io/warmd/pkg/metrics"
)

type doc struct {
	file string
	raw  []byte
	obj  *unstructured.Unstructured
}

func load(t *testing.T, dir string) []doc {
	t.Helper()
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(k.Resources, b) {
			t.Errorf("%s is not listed in %s/kustomization.yaml, so it is never applied", f, dir)
		}
	}
	var out []doc
	for _, f := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%s lists %s: %v", dir, f, err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			raw, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			js, err := yaml.YAMLToJSON(raw)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if string(bytes.TrimSpace(js)) == "null" {
				continue
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(js); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, doc{file: filepath.Join(dir, f), raw: raw, obj: u})
		}
	}
	return out
}

func find[T any](t *testing.T, docs []doc, kind, name string) *T {
	t.Helper()
	for _, d := range docs {
		if d.obj.GetKind() == kind && d.obj.GetName() == name {
			var v T
			if err := yaml.UnmarshalStrict(d.raw, &v); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return &v
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// TestStrictDecode decodes every Kubernetes document into its Go type, unknown fields being errors.
func TestStrictDecode(t *testing.T) {
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	for _, d := range load(t, ".") {
		if _, _, err := codecs.UniversalDeserializer().Decode(d.raw, nil, nil); err != nil {
			t.Errorf("%s %s/%s: %v", d.file, d.obj.GetKind(), d.obj.GetName(), err)
		}
	}
}

// TestSchedulerConfigWiring checks that the KubeSchedulerConfiguration decodes strictly and points
// at the Service's DNS name and port and at the verbs the extender's handler serves.
func TestSchedulerConfigWiring(t *testing.T) {
	docs := load(t, ".")
	cm := find[corev1.ConfigMap](t, docs, "ConfigMap", "warmd-scheduler-config")
	var cfg schedv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("config.yaml is not a KubeSchedulerConfiguration: %v", err)
	}
	if cfg.Kind != "KubeSchedulerConfiguration" || cfg.APIVersion != "kubescheduler.config.k8s.io/v1" || len(cfg.Extenders) != 1 {
		t.Fatalf("config = %+v", cfg)
	}
	ext := cfg.Extenders[0]
	if !ext.NodeCacheCapable || !ext.Ignorable || ext.Weight < 1 || ext.FilterVerb != "filter" || ext.PrioritizeVerb != "prioritize" {
		t.Errorf("extender = %+v", ext)
	}
	u, err := url.Parse(ext.URLPrefix)
	if err != nil {
		t.Fatal(err)
	}
	svc := find[corev1.Service](t, docs, "Service", "warmd-extender")
	if u.Hostname() != svc.Name+"."+svc.Namespace+".svc" || u.Port() != "8888" || svc.Spec.Ports[0].Port != 8888 {
		t.Errorf("urlPrefix %s does not reach Service %s/%s:%d", ext.URLPrefix, svc.Namespace, svc.Name, svc.Spec.Ports[0].Port)
	}
	dep := find[appsv1.Deployment](t, docs, "Deployment", "warmd-extender")
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Args[0] != "extender" || !slices.Contains(c.Args, ":8888") || c.Ports[0].ContainerPort != 8888 {
		t.Errorf("container = %+v", c)
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "warmd-extender" {
		t.Errorf("serviceAccountName = %q", dep.Spec.Template.Spec.ServiceAccountName)
	}
	// the verbs are the handler's routes
	h := extender.New(extender.Config{}, extender.NewIndex(), nil, nil).Handler()
	for _, verb := range []string{ext.FilterVerb, ext.PrioritizeVerb} {
		if _, pattern := h.(interface {
			Handler(*http.Request) (http.Handler, string)
		}).Handler(&http.Request{Method: "POST", URL: &url.URL{Path: "/" + verb}}); pattern == "" {
			t.Errorf("the extender serves no POST /%s", verb)
		}
	}
}

// TestKEDAQueriesUseExportedMetrics keeps the example's queries on metric names warmd registers.
func TestKEDAQueriesUseExportedMetrics(t *testing.T) {
	docs := load(t, "keda")
	so := docs[0].obj
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

// TestApply server-side-applies every document to a real kube-apiserver (after the warmd namespace
// that manifests/ creates).
func TestApply(t *testing.T) {
	env := kubeenv.Start(t)
	ctx := context.Background()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "warmd"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Client.Discovery()))
	for _, d := range load(t, ".") {
		gvk := d.obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", d.file, err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			r = dyn.Resource(m.Resource).Namespace(d.obj.GetNamespace())
		}
		if _, err := r.Apply(ctx, d.obj.GetName(), d.obj, metav1.ApplyOptions{FieldManager: "warmd-extender-manifests-test", Force: true}); err != nil {
			t.Errorf("apply %s %s/%s: %v", d.file, d.obj.GetKind(), d.obj.GetName(), err)
		}
	}
}
