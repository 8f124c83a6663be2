package prewarm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"warmd.io/warmd/internal/pagecachetest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/state"
)

// TestPartFollowsPodsOfThisNode runs the part against a real API server: a vLLM pod bound to this
// node starts a pre-warm of its model, deleting the pod cancels it, a second pod's model is read
// whole into the page cache (mincore), and pods of other nodes or of unmanaged models start nothing.
func TestPartFollowsPodsOfThisNode(t *testing.T) {
	env := kubeenv.Start(t)
	const node = "prewarm-node"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, n := range []string{node, "elsewhere"} {
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dataDir := t.TempDir()
	weights := filepath.Join(dataDir, "weights")
	publish(t, weights, "models--org--big", map[string]int{"model-00001-of-00002.safetensors": 16 * mib, "model-00002-of-00002.safetensors": 16 * mib})
	small := publish(t, weights, "models--org--small", map[string]int{"model.safetensors": 8 * mib, "config.json": 4096})
	cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: node, DataDir: dataDir,
		Models: []config.Model{{Name: "org/big", Source: "s3://m/big/"}, {Name: "org/small", Source: "s3://m/small/"}}}
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	// The big model's first chunk waits until the test has deleted its pod, so the run is still
	// reading when the pod goes away.
	bigStarted, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	onBytes := func(model string, _ int64) {
		if model == "org/big" {
			once.Do(func() { close(bigStarted) })
			<-release
		}
	}
	m := metrics.New(prometheus.NewRegistry())
	store := state.New(nil)
	p, err := New(daemon.Deps{Config: cfg, Store: store, Metrics: m}, Options{Client: env.Client, Resync: 100 * time.Millisecond, OnBytes: onBytes})
	if err != nil || p == nil {
		t.Fatalf("New: %v, %v", p, err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	createPod(t, env.Client, "vllm-big", node, nil, []string{"vllm", "serve", "org/big", "--tensor-parallel-size", "1"})
	select {
	case <-bigStarted:
	case <-time.After(30 * time.Second):
		t.Fatal("no pre-warm started for a vLLM pod bound to this node")
	}
	st := p.Status()
	if len(st.Active) != 1 || st.Active[0].Model != "org/big" || st.Active[0].Pod != "default/vllm-big" || st.Active[0].Budget <= 0 {
		t.Fatalf("status while pre-warming: %+v", st)
	}
	if v := testutil.ToFloat64(m.Prewarm.Runs.WithLabelValues("started")); v != 1 {
		t.Fatalf("started runs %v, want 1", v)
	}

	zero := int64(0)
	if err := env.Client.CoreV1().Pods("default").Delete(ctx, "vllm-big", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run's cancellation", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		a := p.runs["org/big"]
		return a == nil || a.ctx.Err() != nil
	})
	close(release)
	var big Run
	waitFor(t, "the cancelled run in the status", func() bool {
		for _, r := range p.Status().Recent {
			if r.Model == "org/big" {
				big = r
				return true
			}
		}
		return false
	})
	t.Logf("big model's run: %+v", big)
	if big.Outcome != OutcomeCancelled || big.Bytes >= big.Total || (big.Reason != "the pod is gone" && big.Reason != "the pod is being deleted") {
		t.Fatalf("run after its pod was deleted: %+v, want cancelled part way", big)
	}
	if v := testutil.ToFloat64(m.Prewarm.Runs.WithLabelValues("cancelled")); v != 1 {
		t.Fatalf("cancelled runs %v, want 1", v)
	}

	// Neither a pod bound to another node nor one of a model warmd does not manage starts anything.
	createPod(t, env.Client, "vllm-elsewhere", "elsewhere", nil, []string{"vllm", "serve", "org/small"})
	createPod(t, env.Client, "vllm-other", node, map[string]string{"warmd.io/model": "other/model"}, nil)
	for _, b := range small {
		drop(t, b)
	}
	createPod(t, env.Client, "vllm-small", node, map[string]string{"warmd.io/model": "org/small"}, nil)
	var sm Run
	waitFor(t, "the small model's pre-warm to finish", func() bool {
		for _, r := range p.Status().Recent {
			if r.Model == "org/small" {
				sm = r
				return true
			}
		}
		return false
	})
	t.Logf("small model's run: %+v", sm)
	if sm.Outcome != OutcomeFinished || sm.Pod != "default/vllm-small" || sm.Bytes != 8*mib+4096 || sm.Total != sm.Bytes {
		t.Fatalf("small model's run: %+v, want finished with every byte", sm)
	}
	for name, b := range small {
		if r := pagecachetest.Resident(t, b); r < 0.95 {
			t.Errorf("%s is %.0f%% resident after the part's pre-warm", name, r*100)
		}
	}
	time.Sleep(500 * time.Millisecond) // several resyncs: the finished pod is not pre-warmed again
	st = p.Status()
	if len(st.Active) != 0 || len(st.Recent) != 2 {
		t.Fatalf("status %+v: want exactly the two runs above", st)
	}
	if v := testutil.ToFloat64(m.Prewarm.Bytes); v < 8*mib+4096 {
		t.Errorf("warmd_prewarm_bytes_total %v, want at least the small model", v)
	}
	if pub, _ := Section.Get(store); len(pub.Recent) == 0 {
		t.Errorf("no prewarm section published: %+v", pub)
	}
}

func createPod(t *testing.T, cs kube.Interface, name, node string, ann map[string]string, args []string) {
	t.Helper()
	_, err := cs.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{
			{Name: "vllm", Image: "vllm/vllm-openai:v0.11.0", Args: args}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
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

// TestNewOffWithoutAPIServer: with readiness.disabled there is no API client and no part (that
// switch is on daemon.RestartNeeded).
func TestNewOffWithoutAPIServer(t *testing.T) {
	cfg := &config.NodeConfig{NodeName: "n", DataDir: t.TempDir()}
	cfg.Default()
	cfg.Readiness.Disabled = true
	if p, err := New(daemon.Deps{Config: cfg}, Options{}); p != nil || err != nil {
		t.Fatalf("New = %v, %v; want no part", p, err)
	}
}

// TestDisabledAtStartThenEnabledByAReload: with prewarm.disabled the part exists, is ready, says
// "disabled" and pre-warms nothing for a starting pod; a reload that clears the switch pre-warms that
// pod's model with no restart, and one that sets it again says "disabled" again.
func TestDisabledAtStartThenEnabledByAReload(t *testing.T) {
	env := kubeenv.Start(t)
	const node = "prewarm-reload"
	store := state.New(nil)
	p, cfg := runOnNode(t, env, store, node, "org/small", 4*mib, func(c *config.NodeConfig) { c.Prewarm.Disabled = true }, Options{})
	if err := p.Ready(); err != nil {
		t.Errorf("a disabled part is not ready: %v", err)
	}
	waitFor(t, "the disabled state published", func() bool { st, _ := Section.Get(store); return st.State == StateDisabled })
	createPod(t, env.Client, "vllm-small", node, nil, []string{"vllm", "serve", "org/small"})
	time.Sleep(500 * time.Millisecond) // five resyncs: a part that watched would have started a run
	if st := p.Status(); len(st.Active)+len(st.Recent) != 0 {
		t.Fatalf("a disabled part pre-warmed: %+v", st)
	}

	on := *cfg
	on.Prewarm.Disabled = false
	p.Reconfigure(&on)
	waitFor(t, "the pod's model pre-warmed after the reload", func() bool {
		for _, r := range p.Status().Recent {
			if r.Model == "org/small" && r.Outcome == OutcomeFinished {
				return true
			}
		}
		return false
	})
	if st := p.Status(); st.State != StateOn {
		t.Errorf("state after the reload %q, want %q", st.State, StateOn)
	}
	off := on
	off.Prewarm.Disabled = true
	p.Reconfigure(&off)
	waitFor(t, "the disabled state after a second reload", func() bool { return p.Status().State == StateDisabled })
}

// TestReloadedBudgetAppliesToTheNextRun: a reload of prewarm.maxBytes and
// prewarm.memAvailablePercent bounds the next pre-warm with the new figures (pkg/assemble's walk
// of every setting names this test). MemAvailable is read from a file the test writes (1 GiB), so
// the budgets are exact: first maxBytes binds (1 MiB of 50 % of 1 GiB), after the reload the
// percentage does (1 % of 1 GiB, under the new 64 MiB maxBytes).
func TestReloadedBudgetAppliesToTheNextRun(t *testing.T) {
	env := kubeenv.Start(t)
	const node = "prewarm-budget-reload"
	meminfo := filepath.Join(t.TempDir(), "meminfo")
	if err := os.WriteFile(meminfo, []byte("MemTotal:       4194304 kB\nMemAvailable:   1048576 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, cfg := runOnNode(t, env, state.New(nil), node, "org/budget", 16*mib, func(c *config.NodeConfig) {
		c.Prewarm.MaxBytes, c.Prewarm.MemAvailablePercent = resource.MustParse("1Mi"), 50
	}, Options{MemInfo: meminfo})
	run := func(pod string) Run {
		t.Helper()
		createPod(t, env.Client, pod, node, nil, []string{"vllm", "serve", "org/budget"})
		var got Run
		waitFor(t, pod+"'s pre-warm to end", func() bool {
			for _, r := range p.Status().Recent {
				if r.Pod == "default/"+pod && r.Outcome != OutcomeRunning {
					got = r
					return true
				}
			}
			return false
		})
		return got
	}
	if r := run("vllm-budget-a"); r.Budget != 1<<20 || r.Bytes > 1<<20 {
		t.Errorf("before the reload: budget %d, read %d bytes; want a budget of 1 MiB (maxBytes) and no more read", r.Budget, r.Bytes)
	}
	next := *cfg
	next.Prewarm.MaxBytes, next.Prewarm.MemAvailablePercent = resource.MustParse("64Mi"), 1
	p.Reconfigure(&next)
	if r, want := run("vllm-budget-b"), int64(1<<30)/100; r.Budget != want || r.Bytes > want {
		t.Errorf("after the reload: budget %d, read %d bytes; want a budget of %d (1 %% of MemAvailable, under maxBytes 64 MiB)", r.Budget, r.Bytes, want)
	}
}

// runOnNode creates Node node on env's API server, publishes model (one safetensors file of size
// bytes) in a fresh data dir, and runs the pre-warm part for that node until the test ends, on a
// config that mut edits before it is validated; o's Client and Resync are set here.
func runOnNode(t *testing.T, env *kubeenv.Env, store *state.Store, node, model string, size int, mut func(*config.NodeConfig), o Options) (*Part, *config.NodeConfig) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		cancel()
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	publish(t, filepath.Join(dataDir, "weights"), "models--"+strings.ReplaceAll(model, "/", "--"), map[string]int{"model.safetensors": size})
	cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: node, DataDir: dataDir,
		Models: []config.Model{{Name: model, Source: "s3://m/" + model + "/"}}}
	cfg.Default()
	mut(cfg)
	if err := cfg.Validate(); err != nil {
		cancel()
		t.Fatal(err)
	}
	o.Client, o.Resync = env.Client, 100*time.Millisecond
	p, err := New(daemon.Deps{Config: cfg, Store: store}, o)
	if err != nil || p == nil {
		cancel()
		t.Fatalf("New = %v, %v; want a part", p, err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return p, cfg
}
