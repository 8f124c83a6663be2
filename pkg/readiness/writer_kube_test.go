package readiness_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/readiness"
)

// counter counts API requests by method, so tests can prove that nothing was written.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.n[r.Method]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

func (c *counter) get(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func countingClient(t *testing.T, cfg *rest.Config) (kube.Interface, *counter) {
	t.Helper()
	c := &counter{n: map[string]int{}}
	cc := rest.CopyConfig(cfg)
	cc.Wrap(c.wrap)
	cs, err := kube.NewForConfig(cc)
	if err != nil {
		t.Fatal(err)
	}
	return cs, c
}

func createNode(t *testing.T, cs kube.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "ml", "kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	return n
}

func getNode(t *testing.T, cs kube.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", name, err)
	}
	return n
}

// nodeYAML renders the node as `kubectl get node -o yaml` would, without managedFields.
func nodeYAML(t *testing.T, n *corev1.Node) string {
	t.Helper()
	n = n.DeepCopy()
	n.ManagedFields = nil
	n.APIVersion, n.Kind = "v1", "Node"
	b, err := yaml.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func model(name string, warm bool) readiness.ModelInput {
	m := readiness.ModelInput{
		Name: name, Wants: true,
		Image:   readiness.ImageFacts{Ref: "docker.io/vllm/vllm-openai:v0.11.0", Digest: "sha256:4f6b", Pinned: true},
		Weights: readiness.WeightsFacts{Revision: "a09a3545", Path: "/var/lib/warmd/weights/models--" + strings.ReplaceAll(name, "/", "--") + "/snapshots/a09a3545"},
		Cache:   readiness.CacheFacts{Present: warm},
	}
	if warm {
		m.Weights.VerifiedRevision = m.Weights.Revision
	}
	return m
}

const sku = "nvidia-h100-80gb-hbm3.sm90.cuda12.8.drv570-3f9a1c2e"

func input(models ...readiness.ModelInput) readiness.Input {
	return readiness.Input{
		SKU: sku, CompileCacheEnabled: true, Models: models,
		IdentityLabels: map[string]string{"warmd.io/gpu.present": "true", "warmd.io/gpu.count": "8", "warmd.io/gpu.product": "NVIDIA-H100-80GB-HBM3"},
	}
}

func sync1(t *testing.T, w *readiness.Writer) int {
	t.Helper()
	n, err := w.Sync(context.Background())
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	return n
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

func cond(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == nodelabels.ConditionType {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func TestWriterLifecycle(t *testing.T) {
	env := kubeenv.Start(t)
	admin := env.Client
	const name = "readiness-node-a"
	createNode(t, admin, name)
	cs, count := countingClient(t, env.Config)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	w := readiness.NewWriter(readiness.WriterOptions{NodeName: name, Client: cs, Clock: clk, StartupTaint: true, Heartbeat: time.Minute})

	// Cold: one model only has its image, one has nothing.
	nothing := model("meta-llama/Llama-3.1-8B-Instruct", false)
	nothing.Image.Digest, nothing.Image.Pinned = "", false
	w.SetInput(input(model("Qwen/Qwen2.5-7B-Instruct", false), nothing))
	if n := sync1(t, w); n != 3 {
		t.Errorf("cold sync wrote %d times, want 3 (labels, condition, taint)", n)
	}
	n := getNode(t, admin, name)
	t.Logf("cold node:\n%s", nodeYAML(t, n))
	wantLabels := map[string]string{
		"team": "ml", "kubernetes.io/hostname": name, "warmd.io/warm": "false", "warmd.io/gpu.sku": sku,
		"warmd.io/gpu.present": "true", "warmd.io/gpu.count": "8", "warmd.io/gpu.product": "NVIDIA-H100-80GB-HBM3",
		"models.warmd.io/Qwen--Qwen2.5-7B-Instruct": "image", "models.warmd.io/meta-llama--Llama-3.1-8B-Instruct": "cold",
	}
	if !nodelabels.Labels(wantLabels).Equal(n.Labels) {
		t.Errorf("labels\n got %v\nwant %v", n.Labels, wantLabels)
	}
	if c := cond(n); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "ModelsNotWarm" {
		t.Errorf("condition %+v", c)
	}
	if !hasTaint(n, nodelabels.TaintCold) || !hasTaint(n, "nvidia.com/gpu") {
		t.Errorf("taints %v: want warmd.io/cold added beside nvidia.com/gpu", n.Spec.Taints)
	}

	// Nothing changed: no request that writes, even after a resync read and before the heartbeat.
	before := count.get(http.MethodPatch)
	if n := sync1(t, w); n != 0 {
		t.Errorf("unchanged sync wrote %d times", n)
	}
	clk.Step(30 * time.Second)
	w.SetInput(input(model("Qwen/Qwen2.5-7B-Instruct", false), nothing))
	if n := sync1(t, w); n != 0 {
		t.Errorf("sync before heartbeat wrote %d times", n)
	}
	if got := count.get(http.MethodPatch) - before; got != 0 {
		t.Errorf("%d PATCH requests with nothing changed", got)
	}
	// The heartbeat is due: exactly one status write, and the transition time stays.
	clk.Step(31 * time.Second)
	if n := sync1(t, w); n != 1 {
		t.Errorf("heartbeat sync wrote %d times, want 1", n)
	}
	c := cond(getNode(t, admin, name))
	if !c.LastHeartbeatTime.Time.Equal(clk.Now()) || c.LastTransitionTime.Time.Equal(clk.Now()) {
		t.Errorf("heartbeat %v transition %v now %v", c.LastHeartbeatTime, c.LastTransitionTime, clk.Now())
	}

	// Warm: condition flips, warm=true, startup taint removed, nvidia.com/gpu taint kept.
	w.SetInput(input(model("Qwen/Qwen2.5-7B-Instruct", true), model("meta-llama/Llama-3.1-8B-Instruct", true)))
	sync1(t, w)
	n = getNode(t, admin, name)
	t.Logf("warm node:\n%s", nodeYAML(t, n))
	if n.Labels["warmd.io/warm"] != "true" || n.Labels["models.warmd.io/Qwen--Qwen2.5-7B-Instruct"] != "warm" {
		t.Errorf("warm labels %v", n.Labels)
	}
	if c := cond(n); c.Status != corev1.ConditionTrue || c.Reason != "AllModelsWarm" {
		t.Errorf("warm condition %+v", c)
	}
	if hasTaint(n, nodelabels.TaintCold) || !hasTaint(n, "nvidia.com/gpu") {
		t.Errorf("taints %v: want only nvidia.com/gpu", n.Spec.Taints)
	}

	// A model leaves the config: its label goes; an image evicted later flips the other back, but the
	// startup taint does not return (the node was warm once).
	back := model("Qwen/Qwen2.5-7B-Instruct", true)
	back.Image.Digest = ""
	w.SetInput(input(back))
	sync1(t, w)
	n = getNode(t, admin, name)
	if _, ok := n.Labels["models.warmd.io/meta-llama--Llama-3.1-8B-Instruct"]; ok {
		t.Errorf("removed model's label stayed: %v", n.Labels)
	}
	if n.Labels["models.warmd.io/Qwen--Qwen2.5-7B-Instruct"] != "weights" || n.Labels["warmd.io/warm"] != "false" {
		t.Errorf("evicted image not reflected: %v", n.Labels)
	}
	if hasTaint(n, nodelabels.TaintCold) {
		t.Error("startup taint came back on a node that was warm once")
	}
	if n.Labels["team"] != "ml" {
		t.Errorf("foreign label touched: %v", n.Labels)
	}
}

func TestWriterLeavesOtherManagersKeys(t *testing.T) {
	env := kubeenv.Start(t)
	admin := env.Client
	const name = "readiness-node-b"
	createNode(t, admin, name)
	ctx := context.Background()
	w := readiness.NewWriter(readiness.WriterOptions{NodeName: name, Client: admin, Clock: clocktesting.NewFakeClock(time.Now())})

	// Another manager (say a GFD-like labeller) owns warmd.io/gpu.sku with a different value.
	other := func(key, value string) {
		t.Helper()
		_, err := admin.CoreV1().Nodes().Apply(ctx, kube.NewNodeApply(name).WithLabels(map[string]string{key: value}),
			metav1.ApplyOptions{FieldManager: "other-labeller", Force: true})
		if err != nil {
			t.Fatalf("other manager's apply: %v", err)
		}
	}
	other("warmd.io/gpu.sku", "theirs")
	w.SetInput(input(model("Qwen/Qwen2.5-7B-Instruct", true)))
	sync1(t, w)
	n := getNode(t, admin, name)
	if n.Labels["warmd.io/gpu.sku"] != "theirs" || n.Labels["warmd.io/warm"] != "true" {
		t.Errorf("labels %v: want theirs kept and ours set", n.Labels)
	}
	if r := w.Result(); !slices.Contains(r.Blocked, "warmd.io/gpu.sku") {
		t.Errorf("blocked = %v", r.Blocked)
	}

	// A race: the other manager takes a key after warmd read the Node. The server reports the
	// conflict; warmd drops that key and applies the rest.
	other("models.warmd.io/Qwen--Qwen2.5-7B-Instruct", "theirs")
	w.SetInput(input(model("Qwen/Qwen2.5-7B-Instruct", false)))
	sync1(t, w)
	n = getNode(t, admin, name)
	if n.Labels["models.warmd.io/Qwen--Qwen2.5-7B-Instruct"] != "theirs" || n.Labels["warmd.io/warm"] != "false" {
		t.Errorf("labels after race %v", n.Labels)
	}
	if r := w.Result(); !slices.Contains(r.Blocked, "models.warmd.io/Qwen--Qwen2.5-7B-Instruct") {
		t.Errorf("blocked after race = %v", r.Blocked)
	}
}

func TestWriterSurvivesAPIServerRestart(t *testing.T) {
	certDir := t.TempDir() // a fixed cert dir keeps the serving CA across the restart
	env := kubeenv.Start(t, kubeenvCertDir(certDir))
	admin := env.Client
	const name = "readiness-node-c"
	createNode(t, admin, name)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var syncs atomic.Int32
	w := readiness.NewWriter(readiness.WriterOptions{
		NodeName: name, Client: admin, MinInterval: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Resync: time.Second, OnSync: func(readiness.SyncResult) { syncs.Add(1) },
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	w.SetInput(input(model("Qwen/Qwen2.5-7B-Instruct", false)))
	waitFor(t, "cold labels", func() bool { return getNode(t, admin, name).Labels["warmd.io/warm"] == "false" })

	api := env.Env.ControlPlane.APIServer
	if err := api.Stop(); err != nil {
		t.Fatalf("stop kube-apiserver: %v", err)
	}
	// While the server is down the node turns warm; writes fail and are retried with backoff.
	w.SetInput(input(model("Qwen/Qwen2.5-7B-Instruct", true)))
	start := syncs.Load()
	waitFor(t, "failed sync rounds while down", func() bool { return syncs.Load() >= start+3 && w.Result().Error != "" })
	t.Logf("while down: %s", w.Result().Error)
	if err := api.Start(); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	waitFor(t, "warm labels after restart", func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && n.Labels["warmd.io/warm"] == "true" && cond(n) != nil && cond(n).Status == corev1.ConditionTrue
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v", err)
	}
}

func kubeenvCertDir(dir string) kubeenv.Option {
	return func(e *envtest.Environment) { e.ControlPlane.GetAPIServer().CertDir = dir }
}

// waitFor polls cond until it holds, failing the test after a generous bound (not a timing assertion:
// the bound only stops a broken test from hanging).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
