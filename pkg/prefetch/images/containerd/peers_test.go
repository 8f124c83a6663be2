package containerd_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/auth"
	"warmd.io/warmd/pkg/peer/serve"
	"warmd.io/warmd/pkg/prefetch/images/containerd"
	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
	"warmd.io/warmd/pkg/prefetch/images/layerindex"
	"warmd.io/warmd/pkg/prefetch/images/oci"
	"warmd.io/warmd/pkg/prefetch/images/peerblobs"
)

type allowToken struct{}

func (allowToken) Check(_ context.Context, token string) (auth.Verdict, string, error) {
	if token == "ok" {
		return auth.OK, "", nil
	}
	return auth.Unauthenticated, "no", nil
}

// warmNode is a second node that pulled the image through warmd: its own containerd (a private
// 2.4 daemon with its own content store) and the real peer server over that backend's OpenBlob.
// wrap, when set, sits in front of the server (a hostile peer).
func warmNode(t *testing.T, reg *imagetest.Registry, ref string, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	d := imagetest.StartDaemon(t, "2")
	wb := newBackend(t, d.Socket, "", oci.Registry{})
	pull(t, wb, ref)
	var h http.Handler = serve.New(serve.Options{Auth: allowToken{}, ImageLayers: wb})
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

type peerDrops struct {
	mu sync.Mutex
	by map[string]string
}

func freshPeers(urls []string, dr *peerDrops) *containerd.Peers {
	dr.by = map[string]string{}
	return &containerd.Peers{
		Find: func(context.Context, string) ([]string, error) { return urls, nil },
		Fetch: peerblobs.Options{Token: func() (string, error) { return "ok", nil }, Node: "fresh", Piece: 256 << 10,
			OnDrop: func(base, reason string) { dr.mu.Lock(); dr.by[base] = reason; dr.mu.Unlock() }},
	}
}

// TestLayersFromAWarmPeer: a fresh node (the shared daemon) pulls an image a warm node holds; every
// layer of at least 1 MiB comes from the warm node's content store through the peer server, none
// from the registry, on every API path; the image is unpacked and pinned as after any pull.
func TestLayersFromAWarmPeer(t *testing.T) {
	for _, d := range daemons {
		t.Run(d.name, func(t *testing.T) {
			socket := d.socket(t)
			reg := imagetest.NewRegistry(t, imagetest.Options{})
			imagetest.CleanupDaemon(t, socket, "k8s.io", reg)
			img := reg.PushRandom(t, "warmd-img/from-peer:v1", 2<<20, 3)
			ref := reg.Ref("warmd-img/from-peer:v1")
			url := warmNode(t, reg, ref, nil)
			fromRegistry := registryGets(t, reg, img)
			var dr peerDrops
			b := newPeerBackend(t, socket, d.path, freshPeers([]string{url}, &dr))
			_, last := pull(t, b, ref)
			for l, n := range fromRegistry() {
				if n != 0 {
					t.Errorf("layer %s: %d GETs from the registry, want 0 (a warm peer holds it)", l[:19], n)
				}
			}
			for _, l := range last.Layers {
				if !l.FromPeers || !l.Complete || l.Done != l.Size {
					t.Errorf("layer %s progress %+v: want complete, from peers", l.Digest.Encoded()[:12], l)
				}
			}
			if got, err := b.Lookup(t.Context(), ref); err != nil || !got.Unpacked || !got.Pinned {
				t.Errorf("after a pull from peers: %+v, %v", got, err)
			}
			if len(dr.by) != 0 {
				t.Errorf("peers dropped: %v", dr.by)
			}
		})
	}
}

// TestHostilePeerCostsOnlyTime: a peer whose bytes are wrong (one flipped byte per answer) is
// dropped as corrupt, nothing it sent reaches the content store, and the registry serves every
// layer: the pull succeeds with the right image.
func TestHostilePeerCostsOnlyTime(t *testing.T) {
	d := daemons[2] // the warmd path, the default
	socket := d.socket(t)
	reg := imagetest.NewRegistry(t, imagetest.Options{})
	imagetest.CleanupDaemon(t, socket, "k8s.io", reg)
	img := reg.PushRandom(t, "warmd-img/hostile-peer:v1", 2<<20, 2)
	ref := reg.Ref("warmd-img/hostile-peer:v1")
	url := warmNode(t, reg, ref, peertest.Corrupting)
	fromRegistry := registryGets(t, reg, img)
	var dr peerDrops
	b := newPeerBackend(t, socket, d.path, freshPeers([]string{url}, &dr))
	_, last := pull(t, b, ref)
	for _, l := range last.Layers {
		if l.FromPeers {
			t.Errorf("layer %s reported from peers, though the peer's copy was refused", l.Digest.Encoded()[:12])
		}
	}
	for l, n := range fromRegistry() {
		if n != 1 {
			t.Errorf("layer %s: %d GETs from the registry, want 1 (the peer's copy was refused)", l[:19], n)
		}
	}
	if dr.by[url] != peer.DropCorrupt {
		t.Errorf("drops %v: want the peer dropped as corrupt", dr.by)
	}
	if got, err := b.Lookup(t.Context(), ref); err != nil || !got.Unpacked || got.Digest.String() != imagetest.Digest(t, img) {
		t.Errorf("after refusing the peer: %+v, %v", got, err)
	}
	// Nothing of the peer's is left beside the content store's blobs.
	root := contentRoot(t, b)
	if left, _ := filepath.Glob(filepath.Join(root, "warmd-peers", "*")); len(left) != 0 {
		t.Errorf("left in the staging dir: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "warmd-peers", ".*")); len(left) != 0 {
		t.Errorf("left in the staging dir: %v", left)
	}
}

// registryGets returns a func that says, per layer of img, how many GETs the registry answered
// since registryGets was called.
func registryGets(t *testing.T, reg *imagetest.Registry, img v1.Image) func() map[string]int {
	t.Helper()
	before := map[string]int{}
	for _, l := range imagetest.LayerDigests(t, img) {
		before[l] = reg.BlobGets(l)
	}
	return func() map[string]int {
		out := map[string]int{}
		for l, n := range before {
			out[l] = reg.BlobGets(l) - n
		}
		return out
	}
}

func newPeerBackend(t *testing.T, socket, path string, p *containerd.Peers) *containerd.Backend {
	t.Helper()
	b, err := containerd.New(t.Context(), containerd.Options{Address: socket, Namespace: "k8s.io", Snapshotter: "overlayfs",
		Path: path, PollInterval: 20 * time.Millisecond, Peers: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func contentRoot(t *testing.T, b *containerd.Backend) string {
	t.Helper()
	resp, err := b.Client().IntrospectionService().Plugins(t.Context(), "type==io.containerd.content.v1")
	if err != nil || len(resp.Plugins) == 0 {
		t.Fatalf("content plugin: %v", err)
	}
	dir := resp.Plugins[0].Exports["root"]
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestIndexFromAWarmPeer: the warm node inflated the big gzip layer and kept its checkpoint index;
// a fresh node takes the layer and the index from it, and decodes the layer on every core at its
// first pull (no index anywhere else), with nothing from the registry but the manifest and config.
func TestIndexFromAWarmPeer(t *testing.T) {
	socket := testenv.Containerd(t)
	reg := imagetest.NewRegistry(t, imagetest.Options{})
	imagetest.CleanupDaemon(t, socket, "warmd-unpack", reg)
	img, _ := bigImage(t)
	reg.Push(t, "idx/from-peer:v1", img)
	ref := reg.Ref("idx/from-peer:v1")
	indexes := func() *layerindex.Dir {
		root, err := fsroot.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		d, err := layerindex.Open(root, fsroot.MustPath("gzindex"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	warm := imagetest.StartDaemon(t, "2")
	wb, err := containerd.New(t.Context(), containerd.Options{Address: warm.Socket, Namespace: "k8s.io", Snapshotter: "overlayfs",
		Path: containerd.PathWarmd, Indexes: indexes()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	pull(t, wb, ref)
	if s := wb.Unpacked(); s.IndexesBuilt != 1 {
		t.Fatalf("the warm node built %d indexes, want 1 (the case needs one to share): %+v", s.IndexesBuilt, s)
	}
	srv := httptest.NewServer(serve.New(serve.Options{Auth: allowToken{}, ImageLayers: wb}))
	t.Cleanup(srv.Close)

	fromRegistry := registryGets(t, reg, img)
	var dr peerDrops
	fb, err := containerd.New(t.Context(), containerd.Options{Address: socket, Namespace: "warmd-unpack", Snapshotter: "overlayfs",
		Path: containerd.PathWarmd, Indexes: indexes(), Peers: freshPeers([]string{srv.URL}, &dr)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fb.Close() })
	pull(t, fb, ref)
	if s := fb.Unpacked(); s.Indexed != 1 || s.IndexesDiscarded != 0 {
		t.Errorf("fresh node's unpack %+v: want the layer decoded from the peer's index", s)
	}
	for l, n := range fromRegistry() {
		if n != 0 {
			t.Errorf("layer %s: %d GETs from the registry, want 0", l[:19], n)
		}
	}
}
