// Package e2e proves the whole job on real services: two `warmd run` processes (nodes A and B), each
// with its own containerd 2.4.2, data dir and pod-log dir, share one versitygw (S3), one registry and
// one kube-apiserver. It checks the Node objects and `warmd status -o json`, as users and schedulers see
// them. Both nodes replay one recorded H100 inventory (nvml.EnvRecordedInventory), so they have one
// SKU; nothing else differs from production.
package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/google/go-containerregistry/pkg/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/extender"
	modelid "warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/predict"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/readiness"
)

const model = "Qwen/Qwen2.5-7B-Instruct" // the model the replayed vLLM logs serve

func TestTwoNodesWarmUp(t *testing.T) {
	kenv := kubeenv.Start(t)
	s3 := testenv.RequireS3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)

	// The world: a registry with the "vLLM image", a model in S3, a bucket for compile caches.
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	image := strings.TrimPrefix(reg.URL, "http://") + "/e2e/vllm-openai:v0.10.2"
	if _, err := fixtures.PushRandomImage(image, 256<<10, 3); err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprint(time.Now().UnixNano())
	modelBucket, cacheBucket := "e2e-models-"+suffix, "e2e-caches-"+suffix
	m, err := fixtures.NewModel(fixtures.ModelSpec{Shards: 3, TensorsA: 4, BytesPerTensor: 300 << 10, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WriteDir(filepath.Join(s3.Root, modelBucket, "qwen")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s3.Root, cacheBucket), 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(filepath.Join(s3.Root, modelBucket))
	defer os.RemoveAll(filepath.Join(s3.Root, cacheBucket))

	// The cluster: Nodes A, B and a third node C that runs no warmd (cold).
	kubeconfig := kenv.Kubeconfig(t, "warmd-e2e", root)
	for _, name := range []string{"e2e-a", "e2e-b", "e2e-c"} {
		if _, err := kenv.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "team": "inference"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	inventory, _ := filepath.Abs("../../pkg/nvml/testdata/recorded-h100x8.json")

	newNode := func(name string) (*node, *testenv.Daemon) {
		ctrd := testenv.StartContainerd(t)
		n := &node{t: t, name: name, dataDir: filepath.Join(root, name, "data"), podLogs: filepath.Join(root, name, "pods")}
		os.MkdirAll(n.podLogs, 0o755)
		n.config = filepath.Join(root, name, "config.yaml")
		cfg := fmt.Sprintf(`apiVersion: warmd.io/v1alpha1
kind: NodeConfig
nodeName: %s
dataDir: %s
containerd: {address: %s}
s3: {endpoint: %s}
models:
- name: %s
  source: s3://%s/qwen/
  image: %s
weights: {concurrency: 4, chunkSize: 1Mi}
compileCache: {remote: 's3://%s/fleet', quietPeriod: 1s}
phases: {podLogDir: %s}
readiness: {kubeconfig: %s, resync: 30s}
api: {listen: '127.0.0.1:0'}
`, name, n.dataDir, ctrd.Socket, s3.Endpoint, model, modelBucket, image, cacheBucket, n.podLogs, kubeconfig)
		os.WriteFile(n.config, []byte(cfg), 0o644)
		n.env = []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey,
			nvml.EnvRecordedInventory + "=" + inventory}
		return n, ctrd
	}
	a, ctrdA := newNode("e2e-a")
	b, ctrdB := newNode("e2e-b")
	a.start()
	b.start()
	defer func() {
		a.stop(syscall.SIGTERM)
		b.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("node A log:\n%s\nnode B log:\n%s", a.logTail(), b.logTail())
		}
	}()
	modelKey := modelid.LabelKey(model)

	// 1. Both nodes go cold → warm: image pulled, unpacked and pinned in each node's containerd, weights
	// verified in HF layout.
	for _, n := range []*node{a, b} {
		eventually(t, 3*time.Minute, n.name+" labelled warm", func() (bool, string) {
			node, err := kenv.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return node.Labels[modelKey] == "warm" && node.Labels["warmd.io/warm"] == "true", fmt.Sprint(node.Labels)
		})
		st, err := n.status()
		if err != nil {
			t.Fatal(err)
		}
		ws, _ := section(t, st, prefetch.WeightsSection)
		ms, ok := ws.Model(model)
		if !ok || !ms.Verified(model, "main") {
			t.Fatalf("%s weights status %+v", n.name, ms)
		}
		for name, want := range m.Files {
			got, err := os.ReadFile(filepath.Join(ms.SnapshotPath, name))
			if err != nil || sha256.Sum256(got) != sha256.Sum256(want) {
				t.Errorf("%s: %s in the snapshot differs from the source (%v)", n.name, name, err)
			}
		}
		if !strings.Contains(ms.SnapshotPath, "models--Qwen--Qwen2.5-7B-Instruct/snapshots/") {
			t.Errorf("snapshot %s is not in the HF cache layout", ms.SnapshotPath)
		}
	}
	for _, d := range []*testenv.Daemon{ctrdA, ctrdB} {
		assertPinned(t, d.Socket, image)
	}
	nodeA, _ := kenv.Client.CoreV1().Nodes().Get(ctx, "e2e-a", metav1.GetOptions{})
	if c := condition(nodeA, "WarmdReady"); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("node A condition WarmdReady = %+v, want True", c)
	}
	if nodeA.Labels["team"] != "inference" {
		t.Errorf("warmd changed a label it does not own: %v", nodeA.Labels)
	}
	t.Logf("warm node A, as `warmd status` shows it:\n%s", a.human())

	// 2. A fake vLLM start on A compiles (miss); warmd records its phases and captures and uploads the caches.
	startA := fakeVLLM(t, a.podLogs, "default", "vllm-a", "uid-a", a.cacheEnv(model))
	if startA.hit {
		t.Fatal("the first start on the fleet found a compile cache")
	}
	eventually(t, 2*time.Minute, "A records a miss and uploads its caches", func() (bool, string) {
		st, err := a.status()
		if err != nil {
			return false, err.Error()
		}
		ph, _ := section(t, st, phases.Section)
		cs, _ := section(t, st, cache.Section)
		miss := len(ph.Records) > 0 && ph.Records[0].Result.CompileCache == phases.CacheMiss && ph.Records[0].Model == model
		return miss && cs.Uploaded > 0, fmt.Sprintf("records=%d cache=%+v", len(ph.Records), cs.Stats)
	})
	predBefore := predicted(t, kenv, ctx, "e2e-b")

	// 3. B restores the bundles (at its start: restart it) and its own start then hits.
	b.stop(syscall.SIGTERM)
	b.start()
	eventually(t, 2*time.Minute, "B restores A's compile caches", func() (bool, string) {
		st, err := b.status()
		if err != nil {
			return false, err.Error()
		}
		cs, _ := section(t, st, cache.Section)
		return cs.Restored > 0 && cs.State == cache.StateReady, fmt.Sprintf("%+v", cs)
	})
	startB := fakeVLLM(t, b.podLogs, "default", "vllm-b", "uid-b", b.cacheEnv(model))
	if !startB.hit {
		t.Fatal("B's start found no restored compile cache")
	}
	eventually(t, 2*time.Minute, "B records a hit", func() (bool, string) {
		st, err := b.status()
		if err != nil {
			return false, err.Error()
		}
		ph, _ := section(t, st, phases.Section)
		cs, _ := section(t, st, cache.Section)
		hit := len(ph.Records) > 0 && ph.Records[0].Result.CompileCache == phases.CacheHit
		return hit && cs.Hits > 0, fmt.Sprintf("records %+v, cache hits %d", ph.Records, cs.Hits)
	})

	// 4. B's prediction dropped with the restore; the extender prefers B over the cold node C.
	eventually(t, time.Minute, "B's prediction drops", func() (bool, string) {
		after := predicted(t, kenv, ctx, "e2e-b")
		return after > 0 && after < predBefore, fmt.Sprintf("before %.0f s, now %.0f s", predBefore, after)
	})
	scores := prioritize(t, kenv, ctx, []string{"e2e-b", "e2e-c"})
	if scores["e2e-b"] <= scores["e2e-c"] {
		t.Errorf("extender scores %v: want B (warm, cache restored) above C (cold)", scores)
	}

	// 5. kill -9 and restart A: nothing lost, and no write to the Node when nothing changed.
	before, _ := kenv.Client.CoreV1().Nodes().Get(ctx, "e2e-a", metav1.GetOptions{})
	a.stop(syscall.SIGKILL)
	a.start()
	eventually(t, time.Minute, "A back and warm", func() (bool, string) {
		st, err := a.status()
		if err != nil {
			return false, err.Error()
		}
		rs, _ := section(t, st, readiness.Section)
		ph, _ := section(t, st, phases.Section)
		return rs.Warm && rs.LastSync != nil && len(ph.Records) == 1, fmt.Sprintf("warm=%v records=%d", rs.Warm, len(ph.Records))
	})
	time.Sleep(3 * time.Second) // a few writer rounds
	after, _ := kenv.Client.CoreV1().Nodes().Get(ctx, "e2e-a", metav1.GetOptions{})
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("restarting warmd on A changed its Node (resourceVersion %s → %s): labels %v annotations %v\nbefore: %s\nafter: %s",
			before.ResourceVersion, after.ResourceVersion, after.Labels, after.Annotations, nodeWrites(before), nodeWrites(after))
	}
}

func assertPinned(t *testing.T, socket, ref string) {
	t.Helper()
	c, err := containerd.New(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), "k8s.io")
	img, err := c.ImageService().Get(ctx, ref)
	if err != nil {
		t.Fatalf("image %s not in containerd %s: %v", ref, socket, err)
	}
	if img.Labels["io.cri-containerd.pinned"] != "pinned" {
		t.Errorf("image %s not pinned: labels %v", ref, img.Labels)
	}
	ok, err := containerd.NewImage(c, img).IsUnpacked(ctx, "overlayfs")
	if err != nil || !ok {
		t.Errorf("image %s not unpacked into overlayfs: %v %v", ref, ok, err)
	}
}

func condition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func predicted(t *testing.T, kenv *kubeenv.Env, ctx context.Context, name string) float64 {
	t.Helper()
	n, err := kenv.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := predict.ParseAnnotation(n.Annotations[nodelabels.AnnotationPredicted])
	if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	return p[model]
}

// prioritize runs the real extender (informer on the API server) and sends it the body kube-scheduler
// sends for a nodeCacheCapable extender.
func prioritize(t *testing.T, kenv *kubeenv.Env, ctx context.Context, nodes []string) map[string]int64 {
	t.Helper()
	x := extender.New(extender.Config{FilterFailed: true}, extender.NewIndex(), nil, nil)
	xctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = x.Run(xctx, kenv.Client, 0) }()
	eventually(t, 30*time.Second, "extender informer synced", func() (bool, string) { return x.Synced(), "" })
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vllm-new", Namespace: "default",
		Annotations: map[string]string{"warmd.io/model": model}}}
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: &pod, NodeNames: &nodes})
	resp, err := http.Post(srv.URL+"/prioritize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list extenderv1.HostPriorityList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, h := range list {
		out[h.Host] = h.Score
	}
	t.Logf("extender scores: %v", out)
	return out
}

// nodeWrites says who last wrote a Node and what its conditions and taints are, so a failed "no write"
// check names the writer.
func nodeWrites(n *corev1.Node) string {
	var b strings.Builder
	for _, m := range n.ManagedFields {
		fmt.Fprintf(&b, "[%s %s %s %v] ", m.Manager, m.Operation, m.Subresource, m.Time)
	}
	for _, c := range n.Status.Conditions {
		fmt.Fprintf(&b, "{%s=%s %s %q hb=%v tr=%v} ", c.Type, c.Status, c.Reason, c.Message, c.LastHeartbeatTime, c.LastTransitionTime)
	}
	fmt.Fprintf(&b, "taints=%v", n.Spec.Taints)
	return b.String()
}
