// Package fleet is the peer test world: N `warmd run` processes (8 by default), each with its own data
// dir, on one real kube-apiserver and one versitygw origin behind the fault proxy. In
// TestFleetWarmsFromPeers every node is a machine of its own on the network: its own network namespace
// with a veth pair to a bridge and its link capped each way by tc (internal/testenv/links,
// WARMD_FLEET_LINK_RATE bytes/s), the origin behind a link of one node's rate in a namespace of its
// own, the API server through an unshaped relay. It checks that a node group starting together reads
// the origin about once; with WARMD_FLEET_BENCH=1 it first checks the shaping on one node alone, then
// times the fleet with and without peers in rotated rounds (WARMD_FLEET_ROUNDS, default 2), printing
// the `make bench-fleet` contract line. TestImageFromAWarmPeer
// (images_test.go) is the same world for images: a warm node's `warmd run` serves the layers of the
// image it pinned, and a fresh node's `warmd prefetch images` takes them; it is also `make
// bench-images`' world for its warmd_peer arm.
package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"warmd.io/warmd/internal/faultproxy"
	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/internal/testenv/links"
	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/objstore/objstoretest"
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
	// lab, when set, gives every node a network namespace and a link of linkRate bytes/s each way; the
	// origin sits behind a link of the same rate and the API server behind an unshaped relay.
	lab      *links.Lab
	linkRate int64
}

// worldOptions: the model's size and shard count, and the links (linkRate 0: every node on the
// host's loopback at 127.0.0.x, no link of its own).
type worldOptions struct {
	modelBytes int64
	shards     int
	linkRate   int64
	// partBytes, when set, stores every shard larger than it as a multipart upload of parts of this
	// size with CRC32C part checksums (as `aws s3 cp --checksum-algorithm CRC32C` does), so nodes
	// serve each part as soon as it matches; 0: plain objects, served file by file.
	partBytes int
}

func newWorld(t *testing.T, modelBytes int64) *world {
	return newWorldWith(t, worldOptions{modelBytes: modelBytes, shards: 4})
}

func newWorldWith(t *testing.T, o worldOptions) *world {
	modelBytes := o.modelBytes
	kube := kubeenv.Start(t)
	s3 := testenv.RequireS3(t)
	root, err := os.MkdirTemp("", "fleet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if keep := os.Getenv("WARMD_FLEET_KEEP_LOGS"); keep != "" { // for looking into a run afterwards
			logs, _ := filepath.Glob(filepath.Join(root, "*.log"))
			for _, l := range logs {
				if b, err := os.ReadFile(l); err == nil {
					_ = os.WriteFile(filepath.Join(keep, filepath.Base(l)), b, 0o644)
				}
			}
		}
		os.RemoveAll(root)
	})
	w := &world{t: t, kube: kube, s3: s3, root: root, bucket: fmt.Sprintf("fleet-%d", time.Now().UnixNano())}
	shards := int64(o.shards)
	m, err := fixtures.NewModel(fixtures.ModelSpec{Shards: int(shards), TensorsA: 4, BytesPerTensor: modelBytes / shards / 4, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WriteDir(filepath.Join(s3.Root, w.bucket, "m")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(s3.Root, w.bucket)) })
	if o.partBytes > 0 {
		c := objstoretest.NewClient(t, s3, "", objstore.Options{})
		for name, b := range m.Files {
			if len(b) > o.partBytes {
				objstoretest.PutMultipart(t, c.Client(), w.bucket, "m/"+name, b, o.partBytes, types.ChecksumAlgorithmCrc32c, types.ChecksumTypeComposite)
			}
		}
	}
	for _, b := range m.Files {
		w.modelBytes += int64(len(b))
	}
	w.kubeconfig = kube.Kubeconfig(t, "warmd-fleet", root)
	if o.linkRate > 0 {
		w.lab, w.linkRate = links.New(t), o.linkRate
		origin := w.lab.Add("origin", 2, o.linkRate)
		ln, err := origin.Listen(origin.IP + ":0")
		if err != nil {
			t.Fatal(err)
		}
		if w.proxy, err = faultproxy.Serve(ln, s3.Endpoint); err != nil {
			t.Fatal(err)
		}
		w.kubeconfig = w.relayAPI(w.lab.Add("control", 3, 0))
	} else if w.proxy, err = faultproxy.Start(s3.Endpoint); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.proxy.Close() })
	w.token = filepath.Join(root, "token")
	if err := os.WriteFile(w.token, []byte(kube.Token(t, "warmd", "warmd", "warmd.io/peer")), 0o600); err != nil {
		t.Fatal(err)
	}
	w.port = peertest.FreePort(t)
	w.inventory, _ = filepath.Abs("../../pkg/nvml/testdata/recorded-h100x8.json")
	return w
}

// relayAPI opens a relay to the API server inside member ctl and returns a kubeconfig that reaches it
// there (the server's certificate still checked against the loopback address it was issued for).
func (w *world) relayAPI(ctl *links.Member) string {
	t := w.t
	kc, err := clientcmd.LoadFromFile(w.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := ctl.Listen(ctl.IP + ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	for _, c := range kc.Clusters {
		host := strings.TrimPrefix(c.Server, "https://")
		go links.Forward(ln, host)
		c.TLSServerName = strings.Split(host, ":")[0]
		c.Server = "https://" + ln.Addr().String()
		break // envtest writes one cluster
	}
	path := filepath.Join(w.root, "kubeconfig-links")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// node is one `warmd run` process (in its own namespace when the world has links).
type node struct {
	name, dataDir string
	cmd           *exec.Cmd
	link          *links.Member
}

// nodeSpec is what differs between the worlds' nodes: peers on or off, and for an image node its
// containerd section and the model's image.
type nodeSpec struct {
	peers      bool
	containerd string // the containerd section (YAML flow); the embedded store when empty
	image      string // the model's image; none when empty
}

// start creates the Node object (InternalIP 127.0.0.<10+i>, or its link's address) and runs warmd for it.
func (w *world) start(prefix string, i int, spec nodeSpec) *node {
	t := w.t
	n := &node{name: fmt.Sprintf("%s-%d", prefix, i), dataDir: filepath.Join(w.root, fmt.Sprintf("%s-%d", prefix, i))}
	ip := fmt.Sprintf("127.0.0.%d", 10+i)
	if w.lab != nil {
		n.link = w.lab.Add(n.name, 10+i, w.linkRate)
		ip = n.link.IP
	}
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
	args := []string{"run", "--config", path, "--log-format", "text", "--grace", "5s"}
	if lvl := os.Getenv("WARMD_FLEET_LOG_LEVEL"); lvl != "" { // debug, with WARMD_FLEET_KEEP_LOGS, to look into a run
		args = append(args, "--log-level", lvl)
	}
	n.cmd = exec.Command(warmdBin, args...)
	if n.link != nil {
		n.cmd = n.link.Command(warmdBin, args...) // ip netns exec execs warmd: the PID is warmd's
	}
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
peers: {enabled: %v, listen: '%s:%s', tokenFile: %s, uploadLimit: %d}
`, name, dataDir, ctrd, w.proxy.URL, modelName, w.bucket, image, w.root, w.kubeconfig, spec.peers, ip, w.port, w.token, w.uploadLimit())
	path := filepath.Join(dataDir, "..", name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return path
}

// uploadLimit is every node's peers.uploadLimit: its link's rate when it has one, as on a real node
// whose cap (the default 256 MiB/s) is at or below its NIC's share, so a node that serves at its cap
// takes no downloader past its slots (overflow is for a cap the downloaders cannot fill); on the
// host's loopback, with no link, 1 GiB/s.
func (w *world) uploadLimit() int64 {
	if w.linkRate > 0 {
		return w.linkRate
	}
	return 1 << 30
}

func (n *node) stop() {
	if n.cmd != nil && n.cmd.ProcessState == nil {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		_ = n.cmd.Wait()
	}
	if n.link != nil {
		_ = n.link.Delete() // its address is the next run's
		n.link = nil
	}
}

// weights reads the node's weights status from its API socket, as `warmd status` does (in process:
// a `warmd status` per node five times a second would take this machine's CPUs from the nodes).
func (n *node) weights() (prefetch.ModelStatus, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := api.NewClient(filepath.Join(n.dataDir, "warmd.sock")).Status(ctx)
	if err != nil {
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
	// Every progressEvery the log gets each node's MiB on disk and the fleet's rate since the last
	// line: where a run loses time shows as a window whose rate is far under the links'.
	const progressEvery = 5 * time.Second
	have, lastSum, lastAt := make([]int64, n), int64(0), t0
	for deadline := time.Now().Add(timeout); left > 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d nodes not warm after %s", prefix, left, n, timeout)
		}
		for i, nd := range nodes {
			if done[i] {
				continue
			}
			ms, ok := nd.weights()
			if ok {
				have[i] = ms.BytesDone
			}
			if ok && ms.Verified(modelName, "main") {
				done[i], res.statuses[i], have[i] = true, ms, w.modelBytes
				left--
			} else if ok && ms.State == prefetch.StateFailed {
				t.Fatalf("%s failed: %s", nd.name, ms.Reason)
			}
		}
		if since := time.Since(lastAt); since >= progressEvery && left > 0 {
			var sum int64
			mib := make([]int64, n)
			for i, b := range have {
				sum, mib[i] = sum+b, b>>20
			}
			t.Logf("  %s +%.0fs: MiB per node %v, the fleet %.1f MiB/s over the last %.0fs", prefix, time.Since(t0).Seconds(), mib,
				float64(sum-lastSum)/(1<<20)/since.Seconds(), since.Seconds())
			lastSum, lastAt = sum, time.Now()
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
	if why := links.Available(); why != "" {
		testenv.Unavailable(t, why+": the fleet's nodes each have a link of their own (run make test as root)")
	}
	bench := os.Getenv("WARMD_FLEET_BENCH") != ""
	nodes := int(envInt("WARMD_FLEET_NODES", 8))
	rate := envInt("WARMD_FLEET_LINK_RATE", 64<<20)
	w := newWorldWith(t, worldOptions{modelBytes: envInt("WARMD_FLEET_MODEL_BYTES", 64<<20),
		shards: int(envInt("WARMD_FLEET_SHARDS", 4)), linkRate: rate, partBytes: int(envInt("WARMD_FLEET_PART_BYTES", 0))})
	t.Logf("model %d bytes in %d shards (multipart parts of %d bytes; 0: none); every node, and the origin, on a link of %.1f MiB/s each way",
		w.modelBytes, envInt("WARMD_FLEET_SHARDS", 4), envInt("WARMD_FLEET_PART_BYTES", 0), float64(rate)/(1<<20))
	if bench {
		// The shaping holds: one node alone reads the model at its link's rate, not faster.
		alone := w.run("alone", 1, false, 30*time.Minute)
		st := alone.statuses[0]
		got := float64(w.modelBytes) / st.Finished.Sub(st.Started).Seconds()
		t.Logf("one node alone: %d bytes at %.1f MiB/s (link %.1f MiB/s; %s from process start)", w.modelBytes,
			got/(1<<20), float64(rate)/(1<<20), alone.allWarm.Round(time.Millisecond))
		if got > 1.1*float64(rate) {
			t.Fatalf("one node read at %.1f MiB/s over a %.1f MiB/s link: the shaping does not hold", got/(1<<20), float64(rate)/(1<<20))
		}
	}
	rounds := 1
	if bench {
		rounds = int(envInt("WARMD_FLEET_ROUNDS", 2))
	}
	var withT, withoutT, ratios []float64
	for r := range rounds {
		// Rotated: odd rounds run without peers first, so neither arm always meets a cold page cache.
		arms := []bool{true, false}
		if r%2 == 1 {
			arms = []bool{false, true}
		}
		for _, peers := range arms {
			if !peers && !bench {
				continue
			}
			if peers {
				with := w.run(fmt.Sprintf("peers%d", r+1), nodes, true, 30*time.Minute)
				ratio := float64(with.originBytes) / float64(w.modelBytes)
				withT, ratios = append(withT, with.allWarm.Seconds()), append(ratios, ratio)
				checkFromPeers(t, with, nodes, ratio)
				t.Logf("round %d with peers: %d nodes warm in %.1fs, origin sent %.2f x the model", r+1, nodes, with.allWarm.Seconds(), ratio)
			} else {
				without := w.run(fmt.Sprintf("solo%d", r+1), nodes, false, 60*time.Minute)
				withoutT = append(withoutT, without.allWarm.Seconds())
				t.Logf("round %d without peers: %d nodes warm in %.1fs, origin sent %d bytes", r+1, nodes, without.allWarm.Seconds(), without.originBytes)
			}
		}
	}
	if !bench {
		return
	}
	T, U, R := median(withT), median(withoutT), median(ratios)
	t.Logf("with peers %v s, without %v s, origin ratios %v (medians %.1f, %.1f, %.2f)", withT, withoutT, ratios, T, U, R)
	fmt.Printf("fleet: nodes %d, origin_bytes_ratio %.2f, all_warm %.1fs, without_peers %.1fs, speedup %.1f, links %.0f MiB/s\n",
		nodes, R, T, U, U/T, float64(rate)/(1<<20))
}

// checkFromPeers: every node but the seed read the whole model from peers, and the origin sent about one copy.
func checkFromPeers(t *testing.T, with result, nodes int, ratio float64) {
	t.Helper()
	fromPeers := 0
	for i, st := range with.statuses {
		if st.From == nil {
			t.Errorf("node %d: status says nothing of where its bytes came from", i+1)
			continue
		}
		// The timeline shows where a run loses time: waiting for the seed, for a slot, for a new peer.
		t.Logf("  node %d: fetch +%.1fs to +%.1fs, %d bytes from peers %v, %d from the origin, dropped %v", i+1,
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
}

// median of a non-empty sample (the mean of the middle two for an even count).
func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}
