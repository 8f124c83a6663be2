package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"warmd.io/warmd/internal/testenv/cluster"
)

// monitoringObjects returns the ServiceMonitors, PodMonitors and ScaledObjects shipped for prometheus-operator and
// KEDA (their CRDs are not installed here: the test checks what they select against the live cluster).
func monitoringObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, dir := range []string{"../../manifests/monitoring", "../../manifests/extender/monitoring", "../../manifests/examples/monitoring", "../../manifests/extender/keda"} {
		if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); err != nil {
			continue
		}
		out = append(out, kustomizeFiles(t, dir)...)
	}
	return out
}

// monitoringSelectsWhatExists checks, against the running cluster, that every ServiceMonitor selects a
// Service that has endpoints and the port it scrapes, that every Service serving /metrics is scraped by
// one (the extender's series are what KEDA queries), and that every ScaledObject scales an object the
// example created.
func (e *e2e) monitoringSelectsWhatExists(ctx context.Context, t *testing.T) {
	objs := monitoringObjects(t)
	scraped := map[string]bool{} // namespace/name of Services some ServiceMonitor selects
	var monitors, scalers int
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceMonitor":
			monitors++
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			nss, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "namespaceSelector", "matchNames")
			if len(nss) == 0 {
				nss = []string{o.GetNamespace()}
			}
			eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
			var found int
			for _, n := range nss {
				svcs, err := e.c.Clientset.CoreV1().Services(n).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range svcs.Items {
					found++
					scraped[s.Namespace+"/"+s.Name] = true
					for _, ep := range eps {
						port, _ := ep.(map[string]any)["port"].(string)
						ok := false
						for _, p := range s.Spec.Ports {
							ok = ok || p.Name == port
						}
						if !ok {
							t.Errorf("ServiceMonitor %s scrapes port %q, which Service %s/%s does not have", o.GetName(), port, s.Namespace, s.Name)
						}
					}
					es, err := e.c.Clientset.CoreV1().Endpoints(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
					if err != nil || len(es.Subsets) == 0 {
						t.Errorf("ServiceMonitor %s selects Service %s/%s, which has no endpoints (%v)", o.GetName(), s.Namespace, s.Name, err)
					}
				}
			}
			if found == 0 {
				t.Errorf("ServiceMonitor %s/%s selects no Service (labels %v in %v)", o.GetNamespace(), o.GetName(), sel, nss)
			} else {
				t.Logf("ServiceMonitor %s/%s selects %d Service(s)", o.GetNamespace(), o.GetName(), found)
			}
		case "PodMonitor":
			monitors++
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "podMetricsEndpoints")
			pods, err := e.c.Clientset.CoreV1().Pods(o.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
			if err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) == 0 {
				t.Errorf("PodMonitor %s/%s selects no pod (labels %v)", o.GetNamespace(), o.GetName(), sel)
			}
			for _, p := range pods.Items {
				for _, ep := range eps {
					port, _ := ep.(map[string]any)["port"].(string)
					ok := false
					for _, c := range p.Spec.Containers {
						for _, cp := range c.Ports {
							ok = ok || cp.Name == port
						}
					}
					if !ok {
						t.Errorf("PodMonitor %s scrapes port %q, which pod %s/%s does not name", o.GetName(), port, p.Namespace, p.Name)
					}
				}
			}
			t.Logf("PodMonitor %s/%s selects %d pod(s)", o.GetNamespace(), o.GetName(), len(pods.Items))
		case "ScaledObject":
			scalers++
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "scaleTargetRef", "kind")
			name, _, _ := unstructured.NestedString(o.Object, "spec", "scaleTargetRef", "name")
			if kind == "" {
				kind = "Deployment"
			}
			if err := e.exists(ctx, kind, o.GetNamespace(), name); err != nil {
				t.Errorf("ScaledObject %s/%s scales %s %s, which the example does not create: %v", o.GetNamespace(), o.GetName(), kind, name, err)
			} else {
				t.Logf("ScaledObject %s/%s scales %s %s/%s", o.GetNamespace(), o.GetName(), kind, o.GetNamespace(), name)
			}
		}
	}
	if monitors == 0 || scalers == 0 {
		t.Errorf("%d ServiceMonitors and %d ScaledObjects shipped; want at least one of each", monitors, scalers)
	}
	// Every Service of ours serves /metrics (the daemon's and the extender's series): each must be scraped.
	svcs, err := e.c.Clientset.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		if !scraped[s.Namespace+"/"+s.Name] {
			t.Errorf("no ServiceMonitor selects Service %s/%s, whose /metrics the dashboards and KEDA need", s.Namespace, s.Name)
		}
	}
}

func (e *e2e) exists(ctx context.Context, kind, namespace, name string) error {
	switch kind {
	case "Deployment":
		_, err := e.c.Clientset.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		return err
	case "StatefulSet":
		_, err := e.c.Clientset.AppsV1().StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
		return err
	}
	return fmt.Errorf("kind %s is not one the example creates", kind)
}

// nodeEvents checks the Events warmd records on its Node for warm/cold/failed transitions: the fetch
// that failed while the model was missing (Warning) and the model becoming warm (Normal), each naming
// the model, each recorded once however often warmd re-evaluated.
func (e *e2e) nodeEvents(ctx context.Context, t *testing.T) {
	var ours []string
	var warning, normal bool
	err := cluster.Eventually(ctx, 30*time.Second, time.Second, func(ctx context.Context) (bool, error) {
		ev, err := events(ctx, e.c, "", "Node", e.c.Node)
		if err != nil {
			return false, err
		}
		ours, warning, normal = nil, false, false
		for _, x := range ev {
			if !strings.Contains(x.ReportingController+x.Source.Component, "warmd") {
				continue
			}
			ours = append(ours, fmt.Sprintf("%s %s x%d: %s", x.Type, x.Reason, max(x.Count, 1), x.Message))
			if strings.Contains(x.Message, e.w.qwen7b.name) {
				warning = warning || x.Type == corev1.EventTypeWarning
				normal = normal || x.Type == corev1.EventTypeNormal
			}
		}
		return warning && normal, fmt.Errorf("warmd's Events on Node %s: %v", e.c.Node, ours)
	})
	for _, o := range ours {
		t.Logf("event %s", o)
	}
	if err != nil {
		t.Errorf("want a Warning (fetch failed) and a Normal (warm) Event naming %s: %v", e.w.qwen7b.name, err)
	}
}
