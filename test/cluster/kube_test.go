package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/testenv/cluster"
)

const fieldManager = "warmd-cluster-e2e"

// applier server-side-applies unstructured documents as an admin (kubectl apply --server-side).
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(t *testing.T, c *cluster.Cluster) *applier {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Clientset.Discovery()))}
}

func (a *applier) apply(ctx context.Context, u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		a.mapper.Reset()
		if m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
		}
	}
	var r dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		r = a.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	if _, err := r.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// decodeAll splits a multi-document YAML stream into objects (empty documents dropped).
func decodeAll(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(raw, &m); err != nil {
			t.Fatalf("decode: %v\n%s", err, raw)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// kustomizeFiles returns the objects of a kustomization dir's resources, in its order (plain resource
// lists only, which is all manifests/ uses).
func kustomizeFiles(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(dir, "kustomization.yaml")), &k); err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, f := range k.Resources {
		p := filepath.Join(dir, f)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			out = append(out, kustomizeFiles(t, p)...)
			continue
		}
		out = append(out, decodeAll(t, readFile(t, p))...)
	}
	return out
}

// waitPodsReady waits until the pods matching selector in ns are all Running and Ready (at least n).
func waitPodsReady(ctx context.Context, c *cluster.Cluster, ns, selector string, n int, timeout time.Duration) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := cluster.Eventually(ctx, timeout, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		l, err := c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = l.Items
		ready := 0
		var why []string
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil && podReady(&p) {
				ready++
			} else {
				why = append(why, p.Name+": "+podSummary(&p))
			}
		}
		if ready >= n && len(why) == 0 {
			return true, nil
		}
		return false, fmt.Errorf("%d/%d ready: %s", ready, n, strings.Join(why, "; "))
	})
	return pods, err
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podSummary says why a pod is not ready, as kubectl describe would.
func podSummary(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf(" %s=%s (%s)", c.Type, c.Status, c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf(" %s waiting %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf(" %s terminated %s exit %d", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		}
	}
	return s
}

// events lists the Events about an object (kind/name), newest last.
func events(ctx context.Context, c *cluster.Cluster, ns, kind, name string) ([]corev1.Event, error) {
	l, err := c.Clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// httpGetInNode fetches a URL from inside the node's network (pod IPs are reachable only there).
func httpGetInNode(ctx context.Context, c *cluster.Cluster, url string) (int, string, error) {
	out, err := c.InNode(ctx, nil, "curl", "-s", "--max-time", "5", "-w", "\n%{http_code}", url)
	if err != nil {
		return 0, "", err
	}
	s := strings.TrimRight(string(out), "\n")
	i := strings.LastIndexByte(s, '\n')
	code, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return 0, "", fmt.Errorf("curl %s: %q", url, s)
	}
	return code, s[:max(i, 0)], nil
}

// metricSum adds every sample of a metric family (Prometheus text format) whose labels contain all of
// the given label pairs (`model="x"`); found says whether any sample matched.
func metricSum(text, family string, labels ...string) (sum float64, found bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, family) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(family):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // a longer name with this prefix
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(rest, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}
