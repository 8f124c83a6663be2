package check

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/compilekey"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/state"
)

const digestImage = "vllm/vllm-openai@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestPartPredictsBeforeStart runs the part against a real API server: a start recorded on this node
// (its pod still there, running) is what the node's cache holds; a pod bound here with the same spec
// is predicted a hit, one with another TP and an extra VLLM_* variable a miss naming both (never the
// variable's value), each with an Event on its Pod; a pod of another node gets nothing. When their
// starts are recorded, the predictions are checked against the logs' verdicts.
func TestPartPredictsBeforeStart(t *testing.T) {
	env := kubeenv.Start(t)
	const node = "compilekey-node"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, n := range []string{node, "elsewhere"} {
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: node, DataDir: t.TempDir()}
	cfg.Default()
	args := []string{"org/m", "--max-model-len", "4096"}
	env1 := []corev1.EnvVar{{Name: "VLLM_ATTENTION_BACKEND", Value: "FLASHINFER"}, {Name: "HF_TOKEN", Value: "hf_secret"}}

	old := createPod(t, env.Client, "vllm-old", node, args, env1)
	old.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "vllm", Image: digestImage, ImageID: digestImage,
		Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	if _, err := env.Client.CoreV1().Pods("default").UpdateStatus(ctx, old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	store := state.New(nil)
	recs := []phases.Record{startRecord(old, phases.CacheMiss, "1a2b3c4d5e")}
	phases.Section.Publish(store, phases.Status{Records: recs})

	m := metrics.New(prometheus.NewRegistry())
	p := runPart(t, ctx, cancel, daemon.Deps{Config: cfg, Store: store, Metrics: m}, env.Client)
	waitFor(t, "the recorded start's inputs", func() bool { return p.Status().Cached == 1 })

	same := createPod(t, env.Client, "vllm-same", node, args, env1)
	other := createPod(t, env.Client, "vllm-tp2", node, append(slices.Clone(args), "--tensor-parallel-size=2"),
		append(slices.Clone(env1), corev1.EnvVar{Name: "VLLM_USE_DEEP_GEMM", Value: "s3cr3t-looking-value"}))
	createPod(t, env.Client, "vllm-elsewhere", "elsewhere", args, env1)
	var hit, miss Check
	waitFor(t, "two pending checks", func() bool {
		for _, c := range p.Status().Pending {
			switch c.PodUID {
			case string(same.UID):
				hit = c
			case string(other.UID):
				miss = c
			}
		}
		return hit.PodUID != "" && miss.PodUID != ""
	})
	if hit.Predicted != compilekey.Hit || hit.Model != "org/m" {
		t.Fatalf("same spec: %+v, want a hit", hit)
	}
	if miss.Predicted != compilekey.Miss || !slices.Equal(miss.Differs, []string{compilekey.InTP, "env:VLLM_USE_DEEP_GEMM"}) {
		t.Fatalf("other TP and env: %+v, want a miss naming both", miss)
	}
	if len(p.Status().Pending) != 2 {
		t.Fatalf("pending %+v: the pod of another node must not be checked", p.Status().Pending)
	}
	if c, ok := p.Status().ForModel("org/m"); !ok || c.PodUID != string(other.UID) {
		t.Fatalf("ForModel = %+v, %v; want the newest check", c, ok)
	}
	evHit := waitEvent(t, env.Client, same, ReasonHit)
	evMiss := waitEvent(t, env.Client, other, ReasonMiss)
	if evMiss.Type != corev1.EventTypeWarning || !strings.Contains(evMiss.Message, "env:VLLM_USE_DEEP_GEMM") ||
		strings.Contains(evMiss.Message, "s3cr3t") || strings.Contains(evHit.Message, "hf_secret") {
		t.Fatalf("events: %q / %q", evHit.Message, evMiss.Message)
	}
	if v := testutil.ToFloat64(m.CompileKey.Checks.WithLabelValues("miss")); v != 1 {
		t.Fatalf("miss checks %v, want 1", v)
	}

	// The starts are recorded: the same spec hit (agree); the other TP logged a hit too (disagree).
	recs = append([]phases.Record{startRecord(other, phases.CacheHit, "9f9f9f9f9f"), startRecord(same, phases.CacheHit, "1a2b3c4d5e")}, recs...)
	phases.Section.Publish(store, phases.Status{Records: recs})
	waitFor(t, "both checks resolved", func() bool { st := p.Status(); return len(st.Recent) == 2 && len(st.Pending) == 0 })
	st := p.Status()
	if st.Agree != 1 || st.Disagree != 1 || st.Cached != 3 {
		t.Fatalf("status after the starts: %+v", st)
	}
	if v := testutil.ToFloat64(m.CompileKey.Outcomes.WithLabelValues("hit", "hit", Agree)); v != 1 {
		t.Fatalf("agree outcomes %v, want 1", v)
	}
	// The section is published after the status changes: wait for it, never accept another value.
	waitFor(t, "the section published with the agreement", func() bool {
		published, ok := Section.Get(store)
		return ok && published.Agree == 1 && len(published.Pending) == 0
	})
	published, ok := Section.Get(store)
	if !ok || published.Agree != 1 || published.Disagree != 1 {
		t.Fatalf("published section %+v, %v", published, ok)
	}

	// The inputs survive a restart: a new part reads them back without the pods.
	p2, err := New(daemon.Deps{Config: cfg}, Options{Client: env.Client})
	if err != nil || p2.Status().Cached != 3 || p2.Status().Problem != "" {
		t.Fatalf("after a restart: %+v, %v", p2.Status(), err)
	}
}

func startRecord(pod *corev1.Pod, cc phases.CompileCache, hash string) phases.Record {
	return phases.Record{Namespace: pod.Namespace, Pod: pod.Name, PodUID: string(pod.UID), Container: "vllm", Model: "org/m",
		Image: digestImage, GPUSKU: "nvidia-h100-80gb-hbm3", Recorded: time.Now().UTC(),
		Result: phases.Result{VLLMVersion: "0.11.0", CompileCache: cc, CompileCacheHash: hash, Outcome: phases.OutcomeReady}}
}

func createPod(t *testing.T, cs kube.Interface, name, node string, args []string, env []corev1.EnvVar) *corev1.Pod {
	t.Helper()
	pod, err := cs.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{
			{Name: "vllm", Image: digestImage, Command: []string{"vllm", "serve"}, Args: args, Env: env}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return pod
}

func waitEvent(t *testing.T, cs kube.Interface, pod *corev1.Pod, reason string) corev1.Event {
	t.Helper()
	var got corev1.Event
	waitFor(t, reason+" event on "+pod.Name, func() bool {
		evs, err := cs.CoreV1().Events(pod.Namespace).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(pod.UID)).String()})
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.Reason == reason && ev.InvolvedObject.Kind == "Pod" {
				got = ev
				return true
			}
		}
		return false
	})
	return got
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPartFollowsDisabled: with compileCache.disabled at start the part exists, is ready and
// publishes "disabled" without checking a pod; a reload that clears the switch checks the pod bound
// here; one that sets it again stops the check.
func TestPartFollowsDisabled(t *testing.T) {
	env := kubeenv.Start(t)
	const node = "compilekey-off-node"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: node, DataDir: t.TempDir()}
	cfg.Default()
	cfg.CompileCache.Disabled = true
	store := state.New(nil)
	p := runPart(t, ctx, cancel, daemon.Deps{Config: cfg, Store: store, Metrics: metrics.New(prometheus.NewRegistry())}, env.Client)
	section := func() Status { st, _ := Section.Get(store); return st }
	waitFor(t, "the disabled state", func() bool { return section().Disabled })
	if err := p.Ready(); err != nil {
		t.Fatalf("disabled: ready %v", err)
	}
	pod := createPod(t, env.Client, "vllm-a", node, []string{"org/m"}, nil)
	time.Sleep(300 * time.Millisecond) // three resyncs: a disabled check must not look
	if n := len(p.Status().Pending); n != 0 {
		t.Fatalf("disabled, %d pods checked", n)
	}

	on := *cfg
	on.CompileCache.Disabled = false
	p.Reconfigure(&on)
	waitFor(t, "the pod checked after the switch was cleared", func() bool {
		st := section()
		return !st.Disabled && len(st.Pending) == 1 && st.Pending[0].PodUID == string(pod.UID)
	})
	waitFor(t, "ready", func() bool { return p.Ready() == nil })

	p.Reconfigure(cfg)
	waitFor(t, "disabled again", func() bool { return section().Disabled && p.Ready() == nil })
}

// runPart builds the part on d (an H100 node, 100 ms resyncs) and runs it until the test ends (cancel
// then stops it; Run must return nil).
func runPart(t *testing.T, ctx context.Context, cancel context.CancelFunc, d daemon.Deps, c kube.Interface) *Part {
	t.Helper()
	p, err := New(d, Options{Client: c, Resync: 100 * time.Millisecond, SKU: func() string { return "nvidia-h100-80gb-hbm3" }})
	if err != nil || p == nil {
		t.Fatalf("New: %v, %v; want a part", p, err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return p
}
