package peer_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/objstore/objstoretest"
	"warmd.io/warmd/pkg/peer/auth"
	"warmd.io/warmd/pkg/peer/serve"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
	peersrc "warmd.io/warmd/pkg/prefetch/weights/source/peer"
	"warmd.io/warmd/pkg/state"
)

const (
	audience = "warmd.io/peer"
	chunk    = 1 << 20
)

// world is a small fleet on one machine: one real kube-apiserver holding the Node objects, one
// versitygw bucket as the origin, and nodes that each have their own data dir and their own loopback
// address (127.0.0.x) with the peer port every node shares, as Node InternalIPs would.
type world struct {
	kube   *kubeenv.Env
	origin *objstore.S3
	bucket string
	files  map[string][]byte
	model  config.Model
	port   string
	token  string // a file holding warmd's own token for the peer audience
	prefix string // of the Node names of one scenario
	// originDelay, when set, holds every origin GetRange of the nodes made after it is set this long
	// (a slow origin, so a fetch lasts long enough for something to happen during it).
	originDelay time.Duration
	// hold, when set, is an origin file whose ranges the nodes made after it is set read only once
	// holdOpen is closed (a download that stops short of its last file for a while).
	hold     string
	holdOpen chan struct{}
	// holdFrom, with hold, holds only the ranges that reach past this offset of the file (its
	// first parts land, the rest waits).
	holdFrom int64
	// partSums, when set, fills in the part checksums the origin's part list leaves out (versitygw
	// 1.8 answers GetObjectAttributes and HEAD ?partNumber=N without them; AWS S3 gives them),
	// computed from the files' bytes.
	partSums bool
}

// scenario is w for one subtest: its own model name (so its own Node label) and Node names, the
// same origin files, API server and addresses.
func (w *world) scenario(name string) *world {
	c := *w
	c.model.Name = "acme/" + name
	c.prefix = name
	return &c
}

func newWorld(t *testing.T) *world {
	t.Helper()
	s3 := testenv.RequireS3(t)
	kube := kubeenv.Start(t)
	w := &world{kube: kube, bucket: objstoretest.NewBucket(t, s3, "peers")}
	w.origin = objstoretest.NewClient(t, s3, "", objstore.Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	w.files = map[string][]byte{"config.json": []byte(`{"model_type": "llama"}`)}
	for i, n := range []int{9*chunk + 333, 7 * chunk, 5*chunk + 1} {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		w.files[fmt.Sprintf("shard-%d.bin", i+1)] = b
	}
	for n, b := range w.files {
		if err := objstore.PutBytes(context.Background(), w.origin, w.bucket, "m/"+n, b, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.model = config.Model{Name: "acme/fleet", Source: "s3://" + w.bucket + "/m/", Revision: "r1"}
	w.port = peertest.FreePort(t)
	w.token = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(w.token, []byte(kube.Token(t, "warmd", "warmd", audience)), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) size() int64 {
	var n int64
	for _, b := range w.files {
		n += int64(len(b))
	}
	return n
}

// node is one warmd's data dir, state store, metrics and weights engine, with the peer opener the
// daemon wires (pkg/assemble) in front of the origin.
type node struct {
	name, ip string
	cfg      *config.NodeConfig
	store    *state.Store
	metrics  *metrics.Metrics
	engine   *weights.Engine
}

func (w *world) node(t *testing.T, i int, mut func(*config.NodeConfig)) *node {
	t.Helper()
	n := &node{name: fmt.Sprintf("%s-%d", w.prefix, i), ip: peertest.IP(i), store: state.New(time.Now),
		metrics: metrics.New(prometheus.NewRegistry())}
	n.cfg = &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: n.name, DataDir: t.TempDir(),
		Models: []config.Model{w.model}}
	// A 20s seed wait settles for 2s before a node decides it is the seed.
	n.cfg.Peers = config.Peers{Enabled: true, Listen: net.JoinHostPort(n.ip, w.port), TokenFile: w.token,
		SeedWait: metav1.Duration{Duration: 20 * time.Second}}
	n.cfg.Default()
	if mut != nil {
		mut(n.cfg)
	}
	if err := n.cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	open := weights.SourceOpener(func(context.Context) (objstore.Store, error) { return w.origin, nil })
	if w.originDelay > 0 {
		open = delayed(open, w.originDelay)
	}
	if w.partSums {
		open = withPartSums(open, w.files)
	}
	if w.hold != "" {
		open = held(open, w.hold, w.holdFrom, w.holdOpen)
	}
	e, err := weights.New(weights.Options{DataDir: n.cfg.DataDir, ChunkSize: chunk, Concurrency: 4,
		Open: peersrc.Wrap(open, w.kube.Client, n.cfg, n.metrics.Peers, nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	n.engine = e
	peertest.CreateNode(t, w.kube.Client, n.name, n.ip, nil)
	return n
}

// fetch downloads the model on n and publishes its status, as the weights part does.
func (n *node) fetch(t *testing.T, w *world) prefetch.ModelStatus {
	t.Helper()
	st, err := n.engine.Fetch(context.Background(), w.model, nil)
	if err != nil {
		t.Fatalf("%s: fetch: %v", n.name, err)
	}
	prefetch.WeightsSection.Publish(n.store, prefetch.WeightsStatus{Models: []prefetch.ModelStatus{st}})
	for name, want := range w.files {
		got, err := os.ReadFile(filepath.Join(st.SnapshotPath, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: published %s differs from the origin's (%v)", n.name, name, err)
		}
	}
	return st
}

// warm labels n's Node as holding the model warm (what readiness writes once the weights are ready).
func (n *node) warm(t *testing.T, w *world) { n.label(t, w, "warm") }

// label sets the model's label on n's Node, as readiness would.
func (n *node) label(t *testing.T, w *world, value string) {
	t.Helper()
	key := model.LabelKeys([]string{w.model.Name})[w.model.Name]
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	if _, err := w.kube.Client.CoreV1().Nodes().Patch(context.Background(), n.name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// serve runs n's peer server part (as the daemon would) until the test ends.
func (n *node) serve(t *testing.T, w *world) *serve.Part {
	t.Helper()
	p, err := serve.NewPart(daemon.Deps{Config: n.cfg, Store: n.store, Metrics: n.metrics, Kube: w.kube.Client},
		serve.PartOptions{Published: prefetch.PublishedIn(n.store), Staged: prefetch.StagedIn(n.store), Pieces: func(model, rev string) map[string]serve.Pieces {
			out := map[string]serve.Pieces{} // as pkg/assemble hands them over
			for k, v := range prefetch.PiecesIn(n.store)(model, rev) {
				out[k] = serve.Pieces(v)
			}
			return out
		}})
	if err != nil || p == nil {
		t.Fatalf("peer part: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s peer server: %v", n.name, err)
		}
	})
	for deadline := time.Now().Add(5 * time.Second); p.Ready() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s peer server not ready: %v", n.name, p.Ready())
		}
	}
	return p
}

// warmNode makes node i warm from the origin and serving.
func (w *world) warmNode(t *testing.T, i int, mut func(*config.NodeConfig)) *node {
	t.Helper()
	n := w.node(t, i, mut)
	n.label(t, w, "cold") // readiness labels a wanted model cold before its weights are in
	n.fetch(t, w)
	n.serve(t, w)
	n.warm(t, w)
	return n
}

func uploadLimit(q string) func(*config.NodeConfig) {
	return func(c *config.NodeConfig) { c.Peers.UploadLimit = resource.MustParse(q) }
}

func rangeOf(off, n int64) string { return fmt.Sprintf("bytes=%d-%d", off, off+n-1) }

// authFor is the checker the daemon builds: TokenReview against the world's API server.
func authFor(t *testing.T, w *world) serve.Checker {
	t.Helper()
	r, err := auth.New(w.kube.Client, auth.Options{Audience: audience, Username: "system:serviceaccount:warmd:warmd"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rootOf opens n's weights cache root.
func rootOf(t *testing.T, n *node) *fsroot.Root {
	t.Helper()
	r, err := fsroot.Open(filepath.Join(n.cfg.DataDir, "weights"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
