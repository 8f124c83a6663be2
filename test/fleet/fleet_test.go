// Package fleet is the peer test world: N `warmd run` processes (8 by default), each with its own data
// dir and its own loopback address (127.0.0.x, as Node InternalIPs), on one real kube-apiserver and one
// versitygw origin behind the fault proxy with a bandwidth cap. TestFleetWarmsFromPeers checks that a
// node group starting together reads the origin about once; with WARMD_FLEET_BENCH=1 it also runs one
// node alone (to measure a node's fetch rate), caps the origin at an eighth of it, and times the fleet
// with and without peers, printing the `make bench-fleet` contract line. TestImageFromAWarmPeer
// (images_test.go) is the same world for images: a warm node's `warmd run` serves the layers of the
// image it pinned, and a fresh node's `warmd prefetch images` takes them; it is also `make
// bench-images`' world for its warmd_peer arm.
package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/faultproxy"
	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/prefetch"
)

var warmdBin string

func TestMain(m *testing.M) { testenv.MainWithWarmd(m, &warmdBin, "") }

const modelName = "acme/fleet"

func envInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil && v > 0 {
		return v
	}
	return def
}

// world is the shared services and the model in the origin.
type world struct {
	t          *testing.T
	kube       *kubeenv.Env
	s3         testenv.S3
	proxy      *faultproxy.Proxy
	bucket     string
	root       string
	kubeconfig string
	token      string
	port       string
	modelBytes int64
	inventory  string
}

func newWorld(t *testing.T, modelBytes int64) *world {
	kube := kubeenv.Start(t)
	s3 := testenv.RequireS3(t)
	root, err := os.MkdirTemp("", "fleet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	w := &world{t: t, kube: kube, s3: s3, root: root, bucket: fmt.Sprintf("fleet-%d", time.Now().UnixNano())}
	shards := int64(4)
	m, err := fixtures.NewModel(fixtures.ModelSpec{Shards: int(shards), TensorsA: 4, BytesPerTensor: modelBytes / shards / 4, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WriteDir(filepath.Join(s3.Root, w.bucket, "m")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(s3.Root, w.bucket)) })
	for _, b := range m.Files {
		w.modelBytes += int64(len(b))
	}
	if w.proxy, err = faultproxy.Start(s3.Endpoint); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.proxy.Close() })
	w.kubeconfig = kube.Kubeconfig(t, "warmd-fleet", root)
	w.token = filepath.Join(root, "token")
	if err := os.WriteFile(w.token, []byte(kube.Token(t, "warmd", "warmd", "warmd.io/peer")), 0o600); err != nil {
		t.Fatal(err)
	}
	w.port = peertest.FreePort(t)
	w.inventory, _ = filepath.Abs("../../pkg/nvml/testdata/recorded-h100x8.json")
	return w
}

// node is one `warmd run` process.
type node struct {
	name, dataDir string
	cmd           *exec.Cmd
}

// nodeSpec is what differs between the worlds' nodes: peers on or off, and for an image node its
// containerd section and the model's image.
type nodeSpec struct {
	peers      bool
	containerd string // the containerd section (YAML flow); the embedded store when empty
	image      string // the model's image; none when empty
}

// start creates the Node object (InternalIP 127.0.0.<10+i>) and runs warmd for it.
func (w *world) start(prefix string, i int, spec nodeSpec) *node {
	t := w.t
	n := &node{name: fmt.Sprintf("%s-%d", prefix, i), dataDir: filepath.Join(w.root, fmt.Sprintf("%s-%d", prefix, i))}
	ip := fmt.Sprintf("127.0.0.%d", 10+i)
	if _, err := w.kube.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(n.dataDir, 0o755)
	path := w.writeConfig(n.name, n.dataDir, ip, spec)
	logf, err := os.Create(filepath.Join(w.root, n.name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(warmdBin, "run", "--config", path, "--log-format", "text", "--grace", "5s")
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+w.s3.AccessKey, "AWS_SECRET_ACCESS_KEY="+w.s3.SecretKey,
		nvml.EnvRecordedInventory+"="+w.inventory)
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.stop(); logf.Close() })
	return n
}

// writeConfig writes the NodeConfig of node name (peers listening on ip) beside its data dir and
// returns its path.
func (w *world) writeConfig(name, dataDir, ip string, spec nodeSpec) string {
	ctrd, image := spec.containerd, ""
	if ctrd == "" {
		ctrd = "{backend: embedded}"
	}
	if spec.image != "" {
		image = ", image: '" + spec.image + "'"
	}
	cfg := fmt.Sprintf(`apiVersion: warmd.io/v1alpha1
kind: NodeConfig
nodeName: %s
dataDir: %s
containerd: %s
s3: {endpoint: %s}
models:
- {name: %s, source: 's3://%s/m/'%s}
weights: {concurrency: 8, chunkSize: 8Mi}
compileCache: {disabled: true}
prewarm: {disabled: true}
phases: {podLogDir: %s}
readiness: {kubeconfig: %s, resync: 30s}
api: {listen: '127.0.0.1:0'}
peers: {enabled: %v, listen: '%s:%s', tokenFile: %s, uploadLimit: 1Gi}
`, name, dataDir, ctrd, w.proxy.URL, modelName, w.bucket, image, w.root, w.kubeconfig, spec.peers, ip, w.port, w.token)
	path := filepath.Join(dataDir, "..", name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return path
}

func (n *node) stop() {
	if n.cmd != nil && n.cmd.ProcessState == nil {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		_ = n.cmd.Wait()
	}
}

// weights reads the node's weights status through `warmd status -o json`.
func (n *node) weights() (prefetch.ModelStatus, bool) {
	out, err := exec.Command(warmdBin, "status", "--data-dir", n.dataDir, "-o", "json").Output()
	if err != nil {
		return prefetch.ModelStatus{}, false
	}
	var st api.RawStatus
	if json.Unmarshal(out, &st) != nil {
		return prefetch.ModelStatus{}, false
	}
	ws, ok, err := prefetch.WeightsSection.Decode(st.Sections)
	if err != nil || !ok {
		return prefetch.ModelStatus{}, false
	}
	return ws.Model(modelName)
}

// result is one fleet run.
type result struct {
	start       time.Time     // when the first node was started
	allWarm     time.Duration // from start to the last node's weights verified
	originBytes int64
	statuses    []prefetch.ModelStatus
}

// run starts n nodes together and waits until every one holds the model verified.
func (w *world) run(prefix string, n int, peers bool, timeout time.Duration) result {
	t := w.t
	before := w.proxy.BytesServed()
	t0 := time.Now()
	nodes := make([]*node, n)
	for i := range n {
		nodes[i] = w.start(prefix, i+1, nodeSpec{peers: peers})
	}
	res := result{start: t0, statuses: make([]prefetch.ModelStatus, n)}
	done := make([]bool, n)
	left := n
	for deadline := time.Now().Add(timeout); left > 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d nodes not warm after %s", prefix, left, n, timeout)
		}
		for i, nd := range nodes {
			if done[i] {
				continue
			}
			if ms, ok := nd.weights(); ok && ms.Verified(modelName, "main") {
				done[i], res.statuses[i] = true, ms
				left--
			} else if ok && ms.State == prefetch.StateFailed {
				t.Fatalf("%s failed: %s", nd.name, ms.Reason)
			}
		}
	}
	res.allWarm = time.Since(t0)
	res.originBytes = w.proxy.BytesServed() - before
	for _, nd := range nodes {
		nd.stop()
		// The run's Nodes leave the cluster: the next run's nodes reuse their addresses.
		if err := w.kube.Client.CoreV1().Nodes().Delete(context.Background(), nd.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func TestFleetWarmsFromPeers(t *testing.T) {
	bench := os.Getenv("WARMD_FLEET_BENCH") != ""
	nodes := int(envInt("WARMD_FLEET_NODES", 8))
	w := newWorld(t, envInt("WARMD_FLEET_MODEL_BYTES", 64<<20))
	rate := envInt("WARMD_FLEET_ORIGIN_RATE", 0)
	if bench && rate == 0 {
		alone := w.run("alone", 1, false, 30*time.Minute)
		// The node's fetch rate is its download's own (Started to Finished in its status), not the
		// process start around it.
		st := alone.statuses[0]
		took := st.Finished.Sub(st.Started)
		perNode := float64(w.modelBytes) / took.Seconds()
		rate = int64(perNode / 8)
		t.Logf("one node alone: %d bytes in %s (%.1f MiB/s; %s from process start); origin capped at %.1f MiB/s", w.modelBytes,
			took.Round(time.Millisecond), perNode/(1<<20), alone.allWarm.Round(time.Millisecond), float64(rate)/(1<<20))
	}
	if rate == 0 {
		rate = 16 << 20
	}
	w.proxy.SetRate(rate)
	with := w.run("peers", nodes, true, 30*time.Minute)
	ratio := float64(with.originBytes) / float64(w.modelBytes)
	t.Logf("with peers: %d nodes warm in %s, origin sent %d bytes (%.2f x the model)", nodes, with.allWarm.Round(time.Millisecond), with.originBytes, ratio)
	fromPeers := 0
	for i, st := range with.statuses {
		if st.From == nil {
			t.Errorf("node %d: status says nothing of where its bytes came from", i+1)
			continue
		}
		// The timeline shows where a run loses time: waiting for the seed, for a slot, for a new peer.
		t.Logf("  peers-%d: fetch +%.1fs to +%.1fs, %d bytes from peers %v, %d from the origin, dropped %v", i+1,
			st.Started.Sub(with.start).Seconds(), st.Finished.Sub(with.start).Seconds(),
			st.From.PeerBytes, st.From.Peers, st.From.OriginBytes, st.From.Dropped)
		if st.From.PeerBytes == st.BytesTotal {
			fromPeers++
		}
	}
	if fromPeers < nodes-1 {
		t.Errorf("%d of %d nodes read the whole model from peers; want all but the seed", fromPeers, nodes)
	}
	if ratio > 1.25 {
		t.Errorf("origin bytes ratio %.2f; want <= 1.25", ratio)
	}
	if !bench {
		return
	}
	without := w.run("solo", nodes, false, 60*time.Minute)
	t.Logf("without peers: %d nodes warm in %s, origin sent %d bytes", nodes, without.allWarm.Round(time.Millisecond), without.originBytes)
	fmt.Printf("fleet: nodes %d, origin_bytes_ratio %.2f, all_warm %.1fs, without_peers %.1fs, speedup %.1f\n", nodes, ratio,
		with.allWarm.Seconds(), without.allWarm.Seconds(), without.allWarm.Seconds()/with.allWarm.Seconds())
}
