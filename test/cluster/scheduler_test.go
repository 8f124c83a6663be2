package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"warmd.io/warmd/internal/testenv/cluster"
)

// extenderURL is what the shipped scheduler configs name; the test changes only this (the node has no
// cluster DNS and no kube-proxy, so the scheduler reaches an extender pod by its IP).
var extenderURL = regexp.MustCompile(`urlPrefix: *\S+`)

// extenderReady waits for the extender pods and remembers one's IP.
func (e *e2e) extenderReady(ctx context.Context, t *testing.T) {
	pods, err := waitPodsReady(ctx, e.c, ns, "app.kubernetes.io/name=warmd-extender", 1, 2*time.Minute)
	if err != nil {
		t.Fatalf("extender: %v", err)
	}
	e.extenderIP = pods[0].Status.PodIP
	// The Service selects them (the scheduler would use its name where cluster DNS resolves).
	err = cluster.Eventually(ctx, 30*time.Second, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		ep, err := e.c.Clientset.CoreV1().Endpoints(ns).Get(ctx, "warmd-extender", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, s := range ep.Subsets {
			if len(s.Addresses) > 0 {
				return true, nil
			}
		}
		return false, fmt.Errorf("Service warmd-extender has no ready endpoints")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("extender pods Ready (%d); the scheduler will call http://%s:8888", len(pods), e.extenderIP)
}

// mainSchedulerConfig is route 2 of manifests/extender/: the main kube-scheduler's config file, and
// where its comments say to put it on the control-plane node.
const (
	mainSchedulerConfig = "../../manifests/extender/main-scheduler/kube-scheduler-config.yaml"
	mainSchedulerPath   = "/etc/kubernetes/warmd-kube-scheduler-config.yaml"
)

// mainScheduler restarts the node's kube-scheduler with the shipped main-scheduler config (only the
// extender URL changed), as an operator of a self-managed control plane would.
func (e *e2e) mainScheduler(ctx context.Context, t *testing.T) {
	e.extenderReady(ctx, t)
	cfg := extenderURL.ReplaceAllString(string(readFile(t, mainSchedulerConfig)), fmt.Sprintf("urlPrefix: http://%s:8888", e.extenderIP))
	if err := e.c.WriteNodeFile(ctx, mainSchedulerPath, []byte(cfg)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.RestartScheduler(ctx, mainSchedulerPath); err != nil {
		t.Fatalf("kube-scheduler --config %s: %v", mainSchedulerConfig, err)
	}
	e.extenderCalls = e.extenderRequests(ctx, t)
	t.Logf("kube-scheduler runs %s (extender at %s)", mainSchedulerConfig, e.extenderIP)
}

// extenderRequests sums warmd_extender_requests_total{result="ok"} over the extender pods.
func (e *e2e) extenderRequests(ctx context.Context, t *testing.T) float64 {
	t.Helper()
	return e.extenderVerb(ctx, t, "")
}

// extenderMetricsPort is where the extender serves /metrics: its scheduler port, or the plain
// --metrics-listen port once the chart serves the scheduler API over TLS.
func (e *e2e) extenderMetricsPort() int {
	if e.extenderTLS {
		return 8889
	}
	return 8888
}

// assertExtenderCalled checks the extender answered the scheduler since the last look.
func (e *e2e) assertExtenderCalled(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	now := e.extenderRequests(ctx, t)
	if now <= e.extenderCalls {
		t.Errorf("the scheduler placed %s without asking the extender (warmd_extender_requests_total{result=\"ok\"} %v, was %v)", what, now, e.extenderCalls)
	} else {
		t.Logf("the extender answered %v scheduler requests for %s", now-e.extenderCalls, what)
	}
	e.extenderCalls = now
}

// secondScheduler switches to route 1 of manifests/extender/: the main scheduler back to its plain
// config (two schedulers serving one profile would race), then the shipped second kube-scheduler
// (second-scheduler/) with only its image (ours: registry.k8s.io is unreachable here) and the extender
// URL changed, and a vLLM pod that names it.
func (e *e2e) secondScheduler(ctx context.Context, t *testing.T) {
	if err := e.c.RestartScheduler(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var deploy *unstructured.Unstructured
	for _, o := range kustomizeFiles(t, "../../manifests/extender/second-scheduler") {
		switch o.GetKind() {
		case "ConfigMap":
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			for k, v := range data {
				data[k] = extenderURL.ReplaceAllString(v, fmt.Sprintf("urlPrefix: http://%s:8888", e.extenderIP))
			}
			unstructured.SetNestedStringMap(o.Object, data, "data")
		case "Deployment":
			setContainer(t, o, e.w.schedulerImage, nil)
			deploy = o
		}
		if err := e.a.apply(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if deploy == nil {
		t.Fatal("manifests/extender/second-scheduler/ ships no kube-scheduler Deployment")
	}
	sel := "app.kubernetes.io/name=" + deploy.GetLabels()["app.kubernetes.io/name"]
	if _, err := waitPodsReady(ctx, e.c, deploy.GetNamespace(), sel, 1, 2*time.Minute); err != nil {
		t.Fatalf("second scheduler %s: %v", deploy.GetName(), err)
	}
	d := e.vllmDeployment(t)
	if d.Spec.Template.Spec.SchedulerName != "warmd-scheduler" {
		t.Errorf("the example Deployment's schedulerName is %q, not the second scheduler's warmd-scheduler", d.Spec.Template.Spec.SchedulerName)
	}
	e.scheduledBySecond(ctx, t, "vllm-second-scheduler")
	e.assertExtenderCalled(ctx, t, "the warmd-scheduler pod")
}

// scheduledBySecond runs the example vLLM Deployment as name with schedulerName warmd-scheduler and
// checks that the second scheduler placed its pod (the Scheduled event's reporter).
func (e *e2e) scheduledBySecond(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	d := e.vllmDeployment(t)
	d.Spec.Template.Spec.SchedulerName = "warmd-scheduler"
	d.Name, d.Spec.Selector.MatchLabels["app.kubernetes.io/name"] = name, name
	d.Spec.Template.Labels = map[string]string{"app.kubernetes.io/name": name}
	if _, err := e.c.Clientset.AppsV1().Deployments(vllmNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := waitPodsReady(ctx, e.c, vllmNS, "app.kubernetes.io/name="+name, 1, 2*time.Minute)
	if err != nil {
		t.Fatalf("pod for warmd-scheduler: %v", err)
	}
	ev, _ := events(ctx, e.c, vllmNS, "Pod", pods[0].Name)
	by := ""
	for _, x := range ev {
		if x.Reason == "Scheduled" {
			by = x.ReportingController + x.Source.Component
			t.Logf("event Scheduled by %s: %s", by, x.Message)
		}
	}
	if by != "warmd-scheduler" {
		t.Errorf("the pod was scheduled by %q, not the second scheduler (profile warmd-scheduler)", by)
	}
}

// imageGC checks that the kubelet's image GC, its thresholds lowered so it must free space at every pass
// (newWorld restarted it with high 1%, low 0%), removes the image nobody pinned (pulled before that
// restart) while warmd's pinned images stay. The kubelet runs the GC 5 minutes apart, so this waits for
// the pass 5 minutes after that restart.
func (e *e2e) imageGC(ctx context.Context, t *testing.T) {
	cfg, err := e.kubeletConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ImageGCHighThresholdPercent > 1 {
		t.Fatalf("the kubelet's imageGCHighThresholdPercent is %d, not the 1 it was restarted with", cfg.ImageGCHighThresholdPercent)
	}
	start := time.Now()
	err = cluster.Eventually(ctx, time.Until(e.w.gcFrom.Add(6*time.Minute)), 2*time.Second, func(ctx context.Context) (bool, error) {
		out, err := e.c.Ctr(ctx, "images", "ls", "-q")
		if err != nil {
			return false, err
		}
		return !strings.Contains(string(out), e.w.unpinnedImage), fmt.Errorf("%s still present", e.w.unpinnedImage)
	})
	for _, l := range strings.Split(e.c.Log("kubelet"), "\n") {
		if strings.Contains(l, "image filesystem is over the high threshold") || strings.Contains(l, "Removing image to free bytes") ||
			strings.Contains(l, "Image garbage collection") {
			t.Logf("kubelet: %s", l[strings.Index(l, "]")+1:])
		}
	}
	if err != nil {
		t.Fatalf("the kubelet's image GC (high %d%%, low %d%%) never removed %s: %v", cfg.ImageGCHighThresholdPercent, cfg.ImageGCLowThresholdPercent, e.w.unpinnedImage, err)
	}
	t.Logf("image GC removed %s %s after the kubelet restart (this step waited %s)", e.w.unpinnedImage,
		time.Since(e.w.gcFrom).Round(time.Second), time.Since(start).Round(time.Second))
	out, err := e.c.Ctr(ctx, "images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{e.w.vllmImage, e.w.extraImage} {
		if !pinned(string(out), ref) {
			t.Errorf("image GC took warmd's pinned %s (or it lost its pin):\n%s", ref, out)
		}
	}
}

// kubeletConfig reads the running kubelet's configuration through the API server (/configz).
func (e *e2e) kubeletConfig(ctx context.Context) (*kubeletConfigz, error) {
	raw, err := e.c.Clientset.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", e.c.Node, "proxy", "configz").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("kubelet /configz: %w", err)
	}
	var z struct {
		KubeletConfig kubeletConfigz `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &z); err != nil {
		return nil, fmt.Errorf("kubelet /configz: %w", err)
	}
	return &z.KubeletConfig, nil
}

// kubeletConfigz is the part of KubeletConfiguration the e2e reads.
type kubeletConfigz struct {
	ImageGCHighThresholdPercent int `json:"imageGCHighThresholdPercent"`
	ImageGCLowThresholdPercent  int `json:"imageGCLowThresholdPercent"`
}
