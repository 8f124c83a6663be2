package cache_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/faultproxy"
	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/cache/bundle"
	"warmd.io/warmd/pkg/cache/cachetest"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/objstore/objstoretest"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/serve"
	"warmd.io/warmd/pkg/state"
)

const peerAudience = "warmd.io/peer"

// ccWorld is a compile-cache fleet on one machine: one real kube-apiserver holding the Node objects
// (whose labels say which node holds which SKU's cache warm), one versitygw bucket, nodes on their own
// loopback addresses sharing one peer port, each with its own data dir, manager and peer server.
type ccWorld struct {
	kube   *kubeenv.Env
	s3     testenv.S3
	bucket string
	direct objstore.Store
	port   string
	token  string
}

func newCCWorld(t *testing.T) *ccWorld {
	t.Helper()
	s3 := testenv.RequireS3(t)
	w := &ccWorld{s3: s3, kube: kubeenv.Start(t), bucket: objstoretest.NewBucket(t, s3, "ccpeers"), port: peertest.FreePort(t)}
	w.direct = objstoretest.NewClient(t, s3, "", objstore.Options{})
	w.token = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(w.token, []byte(w.kube.Token(t, "warmd", "warmd", peerAudience)), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// ccNode is one warmd's compile-cache manager, wired to peers as the daemon part wires it
// (cache.NewPeerOptions over the real API server and the token file).
type ccNode struct {
	name, ip string
	cfg      *config.NodeConfig
	metrics  *metrics.Metrics
	mgr      *cache.Manager
}

// node creates node i of sku: its Node object (labelled warm for sku's cache when warm), and its
// manager reading the bucket through origin (the direct client when nil).
func (w *ccWorld) node(t *testing.T, i int, sku string, warm bool, origin objstore.Store, mod ...func(*cache.Options)) *ccNode {
	t.Helper()
	n := &ccNode{name: sku[len(sku)-4:] + "-" + string(rune('0'+i)), ip: peertest.IP(i), metrics: metrics.New(prometheus.NewRegistry())}
	n.cfg = &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: n.name, DataDir: t.TempDir()}
	n.cfg.Peers = config.Peers{Enabled: true, Listen: net.JoinHostPort(n.ip, w.port), TokenFile: w.token,
		SeedWait: metav1.Duration{Duration: time.Second}}
	n.cfg.Default()
	if err := n.cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{nodelabels.LabelSKU: nodelabels.Value(sku), model.LabelKey("acme/m"): "cold"}
	if warm {
		labels[model.LabelKey("acme/m")] = "warm"
	}
	peertest.CreateNode(t, w.kube.Client, n.name, n.ip, labels)
	if origin == nil {
		origin = w.direct
	}
	po := cache.NewPeerOptions(daemon.Deps{Config: n.cfg, Kube: w.kube.Client, Metrics: n.metrics})
	if po == nil {
		t.Fatal("no peer options with peers enabled and an API client")
	}
	o := cache.Options{DataDir: n.cfg.DataDir, SKU: sku, Node: n.name, Store: origin, Bucket: w.bucket,
		Prefix: "cc", KeepBundles: true, Peers: po}
	for _, f := range mod {
		f(&o)
	}
	m, err := cache.NewManager(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	n.mgr = m
	return n
}

// compile writes a synthetic compile cache into n's tree, captures and uploads it, and returns what
// the bundles hold ("<component>/<path>" -> sha256) and their total size.
func (n *ccNode) compile(t *testing.T) (map[string]string, int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := cachetest.Write(n.mgr.Layout().Root(), cachetest.Small); err != nil {
		t.Fatal(err)
	}
	res, err := n.mgr.Capture(ctx)
	if err != nil || len(res.Bundles) == 0 {
		t.Fatalf("capture: %d bundles (%v)", len(res.Bundles), err)
	}
	if up, err := n.mgr.Upload(ctx); err != nil || up != len(res.Bundles) {
		t.Fatalf("upload %d of %d: %v", up, len(res.Bundles), err)
	}
	want, size := map[string]string{}, int64(0)
	for _, r := range res.Bundles {
		size += r.Size
		for _, e := range r.Manifest.Entries {
			if e.Type == bundle.TypeFile {
				want[r.Manifest.Component+"/"+e.Path] = e.SHA256
			}
		}
	}
	if kept, _ := n.mgr.KeptBundles(); kept != len(res.Bundles) {
		t.Fatalf("kept %d of the %d captured and uploaded bundles", kept, len(res.Bundles))
	}
	return want, size
}

// serve runs n's peer server part (as the daemon would) until the test ends.
func (n *ccNode) serve(t *testing.T, w *ccWorld) {
	t.Helper()
	p, err := serve.NewPart(daemon.Deps{Config: n.cfg, Store: state.New(time.Now), Metrics: n.metrics, Kube: w.kube.Client}, serve.PartOptions{OpenBundles: cache.OpenKept})
	if err != nil || p == nil {
		t.Fatalf("peer part: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(5 * time.Second); p.Ready() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s peer server not ready: %v", n.name, p.Ready())
		}
	}
}

// tree maps every regular file of n's SKU tree to its sha256.
func (n *ccNode) tree(t *testing.T) map[string]string {
	t.Helper()
	return cachetest.Sums(t, n.mgr.Layout().Root())
}

func (w *ccWorld) proxy(t *testing.T) (*faultproxy.Proxy, objstore.Store) {
	t.Helper()
	p, err := faultproxy.Start(w.s3.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, objstoretest.NewClient(t, w.s3, p.URL, objstore.Options{})
}

func TestBundlesFromPeers(t *testing.T) {
	w := newCCWorld(t)
	ctx := context.Background()

	// (a) A cold node restores every bundle from its warm peer: the bucket serves it no bundle byte
	// (counted at the origin's side, by the proxy in front of it), only the index and manifests.
	const skuA = "nvidia-h200.sm90.cuda13.0.drv580-aaa1"
	warm := w.node(t, 1, skuA, true, nil)
	want, size := warm.compile(t)
	warm.serve(t, w)
	originA, viaA := w.proxy(t)
	cold := w.node(t, 2, skuA, false, viaA)
	res, err := cold.mgr.Restore(ctx)
	if err != nil || len(res.Refused) != 0 || len(res.Restored) == 0 {
		t.Fatalf("restore: %d restored, refused %v (%v)", len(res.Restored), res.Refused, err)
	}
	st := cold.mgr.Stats()
	t.Logf("from a warm peer: %d bundles, %d bytes from peers, %d from the origin (warmd); origin served %d bundle bytes, %d bytes in all",
		len(res.Restored), st.PeerBytes, st.OriginBytes, originA.BytesServedFor(bundle.Ext), originA.BytesServed())
	if got := originA.BytesServedFor(bundle.Ext); got != 0 {
		t.Errorf("the origin served %d bundle bytes, want 0 (every bundle from the peer)", got)
	}
	if st.PeerBytes != size || st.OriginBytes != 0 {
		t.Errorf("stats: %d bytes from peers, %d from the origin; want %d and 0", st.PeerBytes, st.OriginBytes, size)
	}
	if got := testutil.ToFloat64(cold.metrics.Peers.FetchedBytes.WithLabelValues(cache.MetricsModel, peer.FromPeer)); got != float64(size) {
		t.Errorf("warmd_peer_fetched_bytes_total{from=peer} %v, want %d", got, size)
	}
	if got := testutil.ToFloat64(warm.metrics.Peers.ServedBytes); got != float64(size) {
		t.Errorf("the warm peer served %v bytes, want %d", got, size)
	}
	if got := cold.tree(t); !maps.Equal(got, want) {
		t.Errorf("restored tree differs from the captured one: %d files vs %d", len(got), len(want))
	}
	if n, b := cold.mgr.KeptBundles(); n != len(res.Restored) || b != size {
		t.Errorf("the restored node keeps %d bundles (%d bytes), want %d (%d)", n, b, len(res.Restored), size)
	}

	// (b) The only warm peer serves flipped bits (a proxy in front of a good node): it is dropped as
	// corrupt after its first bundle, every bundle comes from the origin, and the tree is right. One
	// download at a time, so "dropped for the rest of the restore" shows as one corrupt body served
	// (with parallel downloads, requests already in flight when the first fails still finish, and each
	// is refused by its digest).
	const skuB = "nvidia-h200.sm90.cuda13.0.drv580-bbb2"
	good := w.node(t, 3, skuB, false, nil)
	wantB, sizeB := good.compile(t)
	good.serve(t, w)
	evil, err := faultproxy.StartOn(net.JoinHostPort(peertest.IP(4), w.port), "http://"+net.JoinHostPort(good.ip, w.port))
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Close()
	evil.Inject(faultproxy.Faults{Corrupt: 1000, Match: func(*http.Request) bool { return true }})
	peertest.CreateNode(t, w.kube.Client, "evil-4", peertest.IP(4), map[string]string{nodelabels.LabelSKU: nodelabels.Value(skuB), model.LabelKey("acme/m"): "warm"})
	originB, viaB := w.proxy(t)
	victim := w.node(t, 5, skuB, false, viaB, func(o *cache.Options) { o.Concurrency = 1 })
	res, err = victim.mgr.Restore(ctx)
	if err != nil || len(res.Refused) != 0 {
		t.Fatalf("restore past a corrupt peer: refused %v (%v)", res.Refused, err)
	}
	st = victim.mgr.Stats()
	t.Logf("past a corrupt peer: %d bundles, %d bytes from peers, %d from the origin; origin served %d bundle bytes; %d peer(s) dropped; evil proxy flipped %d bodies",
		len(res.Restored), st.PeerBytes, st.OriginBytes, originB.BytesServedFor(bundle.Ext), st.PeersDropped, evil.Injected())
	if evil.Injected() != 1 || st.PeersDropped != 1 {
		t.Errorf("the corrupt peer served %d bodies and was dropped %d times; want 1 and 1 (dropped for the rest of the restore)", evil.Injected(), st.PeersDropped)
	}
	if got := testutil.ToFloat64(victim.metrics.Peers.Dropped.WithLabelValues(peer.DropCorrupt)); got != 1 {
		t.Errorf("warmd_peer_dropped_total{reason=corrupt} %v, want 1", got)
	}
	if got := originB.BytesServedFor(bundle.Ext); got != sizeB || st.OriginBytes != sizeB || st.PeerBytes != 0 {
		t.Errorf("origin served %d bundle bytes (warmd counted %d origin, %d peer); want %d from the origin", got, st.OriginBytes, st.PeerBytes, sizeB)
	}
	if got := victim.tree(t); !maps.Equal(got, wantB) {
		t.Errorf("tree restored past a corrupt peer differs: %d files vs %d", len(got), len(wantB))
	}

	// (c), (d) The bundle route of the warm node, through the daemon's own TokenReview check.
	t.Run("route", func(t *testing.T) { bundleRoute(t, w, warm) })
}

// bundleRoute checks who may read the bundle route and what it answers: only warmd's token for the
// peer audience reads; a digest that is not 64 lowercase hex digits is 400; a bundle not kept, a temp
// file's bytes and a link named by a digest are 404.
func bundleRoute(t *testing.T, w *ccWorld, n *ccNode) {
	var sha string
	var size int64
	for _, r := range n.mgr.Records() {
		sha, size = r.SHA256, r.Size
		break
	}
	base := "http://" + net.JoinHostPort(n.ip, w.port)
	good := w.kube.Token(t, "warmd", "warmd", peerAudience)
	kept, err := fsroot.Open(filepath.Join(n.cfg.DataDir, cache.KeptDir))
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	whole, err := kept.ReadFile(fsroot.MustPath(sha), 1<<30)
	if err != nil || int64(len(whole)) != size {
		t.Fatalf("kept bundle: %d bytes (%v)", len(whole), err)
	}
	// An unfinished download sits in the kept dir under a temp name; its bytes' digest has no file.
	tmp, err := kept.CreateTemp(fsroot.Path{}, "bundle")
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Abort()
	partial := []byte("half a bundle, not verified")
	tmp.Write(partial)
	sum := sha256.Sum256(partial)
	tmpDigest := hex.EncodeToString(sum[:])
	other := strings.Repeat("ab", 32)
	if err := kept.Symlink(sha, fsroot.MustPath(other)); err != nil {
		t.Fatal(err)
	}

	url := peer.BundleURL(base, sha)
	if resp, body := peertest.Get(t, http.MethodGet, url, good, "bytes=10-19"); resp.StatusCode != http.StatusPartialContent || string(body) != string(whole[10:20]) {
		t.Errorf("ranged GET: %s, %d bytes", resp.Status, len(body))
	}
	if resp, body := peertest.Get(t, http.MethodHead, url, good, ""); resp.StatusCode != http.StatusOK || len(body) != 0 || resp.ContentLength != size {
		t.Errorf("HEAD: %s, length %d, want %d", resp.Status, resp.ContentLength, size)
	}
	for _, tc := range []struct {
		name, url, token string
		want             int
	}{
		{"no token", url, "", http.StatusUnauthorized},
		{"token for another audience", url, w.kube.Token(t, "warmd", "warmd", "https://kubernetes.default.svc"), http.StatusUnauthorized},
		{"uppercase digest", peer.BundleURL(base, strings.ToUpper(sha)), good, http.StatusBadRequest},
		{"short digest", peer.BundleURL(base, sha[:63]), good, http.StatusBadRequest},
		{"digest and more", peer.BundleURL(base, sha+"/x"), good, http.StatusBadRequest},
		{"a temp file's name", peer.BundleURL(base, tmp.Path().String()), good, http.StatusBadRequest},
		{"a temp file's digest", peer.BundleURL(base, tmpDigest), good, http.StatusNotFound},
		{"a link named by a digest", peer.BundleURL(base, other), good, http.StatusNotFound},
		{"not kept", peer.BundleURL(base, strings.Repeat("0", 64)), good, http.StatusNotFound},
	} {
		if resp, body := peertest.Get(t, http.MethodGet, tc.url, tc.token, ""); resp.StatusCode != tc.want {
			t.Errorf("%s: %s %q, want %d", tc.name, resp.Status, body, tc.want)
		}
	}
	for reason, want := range map[string]float64{serve.ReasonUnauthenticated: 2, serve.ReasonBadRequest: 4, serve.ReasonNotFound: 3} {
		if got := testutil.ToFloat64(n.metrics.Peers.Refused.WithLabelValues(reason)); got != want {
			t.Errorf("refused %s: %v, want %v", reason, got, want)
		}
	}
}
