package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/vllm"
)

const m7b = "Qwen/Qwen2.5-7B-Instruct"

// fixtureNodes are what warmd daemons would have published: states and predictions per model.
func fixtureNodes() []*corev1.Node {
	key := model.LabelKey(m7b)
	mk := func(name, state, pred string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}}
		if state != "" {
			n.Labels[nodelabels.LabelSKU] = "nvidia-h100-80gb-hbm3"
			n.Labels[key] = state
		}
		if pred != "" {
			n.Annotations[nodelabels.AnnotationPredicted] = pred
		}
		return n
	}
	return []*corev1.Node{
		mk("ext-warm", "warm", `{"Qwen/Qwen2.5-7B-Instruct":70,"Qwen/Qwen2.5-32B-Instruct":150}`),
		mk("ext-weights", "weights", `{"Qwen/Qwen2.5-7B-Instruct":140}`),
		mk("ext-cold", "cold", `{"Qwen/Qwen2.5-7B-Instruct":430}`),
		mk("ext-failed", "failed", `{"Qwen/Qwen2.5-7B-Instruct":71}`),
		mk("ext-nowarmd", "", ""),
		mk("ext-badann", "warm", `not json`),
	}
}

type world struct {
	cs  kube.Interface
	x   *Extender
	srv *httptest.Server
	reg *prometheus.Registry
}

func startWorld(t *testing.T, cfg Config) *world {
	t.Helper()
	env := kubeenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, n := range fixtureNodes() {
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create node %s: %v", n.Name, err)
		}
	}
	reg := prometheus.NewRegistry()
	ix := NewIndex()
	rep := NewReplicas(10*time.Minute, nil)
	x := New(cfg, ix, metrics.NewExtender(reg, ix, rep), slog.New(slog.NewTextHandler(io.Discard, nil)))
	x.TrackReplicas(rep)
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx, env.Client, 0) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("extender Run: %v", err)
		}
	})
	waitFor(t, "informer sync", func() bool { return x.Synced() && ix.Len() == len(fixtureNodes()) })
	srv := httptest.NewServer(x.Handler())
	t.Cleanup(srv.Close)
	return &world{cs: env.Client, x: x, srv: srv, reg: reg}
}

// waitFor polls cond (an informer is eventually consistent); the bound only stops a broken test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *world) post(t *testing.T, path string, body []byte, out any) {
	t.Helper()
	resp, err := http.Post(w.srv.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s: %s", path, resp.Status, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("decode %s response %s: %v", path, b, err)
	}
}

func vllmPod(model string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "llm"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "vllm", Image: "docker.io/vllm/vllm-openai:v0.11.0", Args: []string{"--model", model},
		}}},
	}
}

// argsBody is the JSON kube-scheduler's HTTPExtender sends: json.Marshal of ExtenderArgs.
func argsBody(t testing.TB, pod *corev1.Pod, nodes *corev1.NodeList, names []string) []byte {
	t.Helper()
	a := extenderv1.ExtenderArgs{Pod: pod, Nodes: nodes}
	if nodes == nil {
		a.NodeNames = &names
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func scores(l extenderv1.HostPriorityList) map[string]int64 {
	m := map[string]int64{}
	for _, h := range l {
		m[h.Host] = h.Score
	}
	return m
}

func TestExtenderAgainstAPIServer(t *testing.T) {
	w := startWorld(t, Config{FilterFailed: true})
	ctx := context.Background()
	all := []string{"ext-warm", "ext-weights", "ext-cold", "ext-failed", "ext-nowarmd", "ext-badann", "ext-unknown"}
	list, err := w.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantScores := map[string]int64{
		// fastest (70 s) = 10, then 1 + 9 × 70/s: 140 s → 6, 430 s → 2. The failed node's prediction
		// (71 s) is no lead time: 0, as a node without one.
		"ext-warm": 10, "ext-failed": 0, "ext-weights": 6, "ext-cold": 2,
		"ext-nowarmd": 0, "ext-badann": 0, "ext-unknown": 0,
	}

	t.Run("prioritize, nodeCacheCapable (recorded scheduler body)", func(t *testing.T) {
		body, err := os.ReadFile("testdata/prioritize-nodenames.json")
		if err != nil {
			t.Fatal(err)
		}
		var got extenderv1.HostPriorityList
		w.post(t, "/prioritize", body, &got)
		want := map[string]int64{"ext-warm": 10, "ext-weights": 6, "ext-cold": 2, "ext-failed": 0, "ext-nowarmd": 0, "ext-unknown": 0}
		if s := scores(got); len(got) != len(want) || !maps.Equal(s, want) {
			t.Errorf("scores = %v, want %v", s, want)
		}
	})
	t.Run("prioritize with full Nodes", func(t *testing.T) {
		var got extenderv1.HostPriorityList
		w.post(t, "/prioritize", argsBody(t, vllmPod(m7b), list, nil), &got)
		want := map[string]int64{}
		for _, n := range list.Items {
			want[n.Name] = wantScores[n.Name]
		}
		if s := scores(got); !maps.Equal(s, want) {
			t.Errorf("scores = %v, want %v", s, want)
		}
	})
	t.Run("prioritize: pod without a model is neutral", func(t *testing.T) {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}
		var got extenderv1.HostPriorityList
		w.post(t, "/prioritize", argsBody(t, pod, nil, all), &got)
		for _, h := range got {
			if h.Score != 0 {
				t.Errorf("%s scored %d, want 0 for every node", h.Host, h.Score)
			}
		}
		if len(got) != len(all) {
			t.Errorf("got %d hosts, want %d", len(got), len(all))
		}
	})
	t.Run("prioritize by annotation for another model", func(t *testing.T) {
		pod := vllmPod("ignored")
		pod.Annotations = map[string]string{vllm.AnnotationModel: "Qwen/Qwen2.5-32B-Instruct"}
		var got extenderv1.HostPriorityList
		w.post(t, "/prioritize", argsBody(t, pod, nil, all), &got)
		if s := scores(got); s["ext-warm"] != 10 || s["ext-weights"] != 0 {
			t.Errorf("scores = %v, want only ext-warm at 10", s)
		}
	})
	t.Run("filter, nodeCacheCapable: failed node is unresolvable", func(t *testing.T) {
		var got extenderv1.ExtenderFilterResult
		w.post(t, "/filter", argsBody(t, vllmPod(m7b), nil, all), &got)
		if got.NodeNames == nil || len(*got.NodeNames) != len(all)-1 || got.Nodes != nil {
			t.Fatalf("NodeNames = %v, Nodes = %v; want every name but ext-failed", got.NodeNames, got.Nodes)
		}
		msg := got.FailedAndUnresolvableNodes["ext-failed"]
		if !strings.Contains(msg, m7b) || !strings.Contains(msg, "failed") {
			t.Errorf("failure message = %q", msg)
		}
		if got.Error != "" {
			t.Errorf("Error = %q", got.Error)
		}
	})
	t.Run("filter with full Nodes returns Nodes", func(t *testing.T) {
		var got extenderv1.ExtenderFilterResult
		w.post(t, "/filter", argsBody(t, vllmPod(m7b), list, nil), &got)
		if got.Nodes == nil || len(got.Nodes.Items) != len(list.Items)-1 || got.NodeNames != nil {
			t.Fatalf("Nodes = %v, NodeNames = %v; want every Node but ext-failed", got.Nodes, got.NodeNames)
		}
		for _, n := range got.Nodes.Items {
			if n.Name == "ext-failed" {
				t.Error("ext-failed passed the filter")
			}
		}
		if _, ok := got.FailedAndUnresolvableNodes["ext-failed"]; !ok {
			t.Errorf("FailedAndUnresolvableNodes = %v", got.FailedAndUnresolvableNodes)
		}
	})
	t.Run("filter: pod without a model passes everywhere", func(t *testing.T) {
		var got extenderv1.ExtenderFilterResult
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}
		w.post(t, "/filter", argsBody(t, pod, nil, all), &got)
		if got.NodeNames == nil || len(*got.NodeNames) != len(all) || len(got.FailedAndUnresolvableNodes) != 0 {
			t.Errorf("result = %+v, want every node", got)
		}
	})
	t.Run("a Node update reaches the scores through the informer", func(t *testing.T) {
		n, err := w.cs.CoreV1().Nodes().Get(ctx, "ext-cold", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations[nodelabels.AnnotationPredicted] = `{"Qwen/Qwen2.5-7B-Instruct":35}`
		if _, err := w.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "updated prediction", func() bool {
			info, ok := w.x.index.Get("ext-cold")
			return ok && info.Predicted[m7b] == 35
		})
		var got extenderv1.HostPriorityList
		w.post(t, "/prioritize", argsBody(t, vllmPod(m7b), nil, all), &got)
		if s := scores(got); s["ext-cold"] != 10 || s["ext-warm"] != 6 {
			t.Errorf("scores = %v, want ext-cold 10 and ext-warm 6", s)
		}
	})
	t.Run("a deleted Node is forgotten", func(t *testing.T) {
		if err := w.cs.CoreV1().Nodes().Delete(ctx, "ext-weights", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "node deletion", func() bool { _, ok := w.x.index.Get("ext-weights"); return !ok })
	})
	t.Run("metrics", func(t *testing.T) {
		want := `
# HELP warmd_warm_nodes Nodes whose models.warmd.io/<model> label is warm, per model.
# TYPE warmd_warm_nodes gauge
warmd_warm_nodes{model="Qwen/Qwen2.5-7B-Instruct"} 2
`
		if err := testutil.GatherAndCompare(w.reg, strings.NewReader(want), "warmd_warm_nodes"); err != nil {
			t.Error(err)
		}
		want = `
# HELP warmd_cluster_fastest_ready_seconds Lowest predicted time-to-ready of a new replica over all Nodes (warmd.io/predicted-ready), per model.
# TYPE warmd_cluster_fastest_ready_seconds gauge
warmd_cluster_fastest_ready_seconds{model="Qwen/Qwen2.5-32B-Instruct"} 150
warmd_cluster_fastest_ready_seconds{model="Qwen/Qwen2.5-7B-Instruct"} 35
`
		if err := testutil.GatherAndCompare(w.reg, strings.NewReader(want), "warmd_cluster_fastest_ready_seconds"); err != nil {
			t.Error(err)
		}
		if n := testutil.ToFloat64(w.x.metrics.Requests.WithLabelValues("prioritize", "ok")); n < 5 {
			t.Errorf("prioritize requests counted = %v, want >= 5", n)
		}
	})
	t.Run("replica signal from Pod Ready conditions", func(t *testing.T) {
		pods := w.cs.CoreV1().Pods("default")
		for _, tc := range []struct {
			name    string
			readyAt time.Time
		}{{"vllm-old", time.Now().Add(-time.Hour)}, {"vllm-fresh", time.Now().Add(-time.Minute)}, {"vllm-starting", time.Time{}}} {
			p := vllmPod(m7b)
			p.Name, p.Namespace = tc.name, "default"
			created, err := pods.Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.readyAt.IsZero() {
				continue
			}
			created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(tc.readyAt)}}
			if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "replica counts", func() bool {
			ready, fresh := w.x.replicas.Counts()
			return ready[m7b] == 2 && fresh[m7b] == 1
		})
		want := `
# HELP warmd_vllm_fresh_replicas Ready vLLM pods of each model that became ready within the freshness window (empty prefix cache).
# TYPE warmd_vllm_fresh_replicas gauge
warmd_vllm_fresh_replicas{model="Qwen/Qwen2.5-7B-Instruct"} 1
# HELP warmd_vllm_ready_replicas vLLM pods of each model whose Ready condition is True.
# TYPE warmd_vllm_ready_replicas gauge
warmd_vllm_ready_replicas{model="Qwen/Qwen2.5-7B-Instruct"} 2
`
		if err := testutil.GatherAndCompare(w.reg, strings.NewReader(want), "warmd_vllm_fresh_replicas", "warmd_vllm_ready_replicas"); err != nil {
			t.Error(err)
		}
		if err := pods.Delete(ctx, "vllm-fresh", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "deleted replica", func() bool { _, fresh := w.x.replicas.Counts(); return fresh[m7b] == 0 })
	})
	t.Run("bad bodies are 400 with a fix", func(t *testing.T) {
		resp, err := http.Post(w.srv.URL+"/filter", "application/json", strings.NewReader("{"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "ExtenderArgs") {
			t.Errorf("got %s %s", resp.Status, b)
		}
	})
	t.Run("readyz once synced", func(t *testing.T) {
		resp, err := http.Get(w.srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("readyz = %s", resp.Status)
		}
	})
}

func TestFilterOffKeepsFailedNodes(t *testing.T) {
	ix := NewIndex()
	for _, n := range fixtureNodes() {
		ix.Upsert(n)
	}
	x := New(Config{}, ix, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	names := []string{"ext-failed", "ext-warm"}
	res := x.Filter(&extenderv1.ExtenderArgs{Pod: vllmPod(m7b), NodeNames: &names})
	if res.NodeNames == nil || len(*res.NodeNames) != 2 || len(res.FailedAndUnresolvableNodes) != 0 {
		t.Errorf("result = %+v, want both nodes kept when FilterFailed is off", res)
	}
	if info, _ := ix.Get("ext-badann"); info.PredictErr == nil {
		t.Error("a malformed annotation parsed without error")
	}
}
