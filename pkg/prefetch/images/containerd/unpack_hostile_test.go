package containerd_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/inflate"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/containerd"
	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
)

// memIndexes is an IndexStore in memory whose entries a test can tamper with.
type memIndexes struct {
	mu sync.Mutex
	m  map[digest.Digest][]byte
}

func (s *memIndexes) Get(_ context.Context, d digest.Digest) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[d], nil
}

func (s *memIndexes) Put(_ context.Context, d digest.Digest, p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[d] = p
	return nil
}

func (s *memIndexes) Remove(_ context.Context, d digest.Digest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, d)
	return nil
}

// bigLayer is a 40 MiB tar of text-like data, large enough for checkpoints at the default span.
func bigLayer(t *testing.T) []byte {
	rnd := rand.New(rand.NewPCG(5, 6))
	words := strings.Fields("libtorch cuda kernel flashinfer triton vllm weight shard tensor layer")
	var body strings.Builder
	for body.Len() < 40<<20 {
		body.WriteString(words[rnd.IntN(len(words))])
		body.WriteByte(' ')
	}
	var es []entry
	es = append(es, entry{hdr('0', "usr/lib/big.txt", 0o644), body.String()})
	z := tarOf(t, es)
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write(z)
	w.Close()
	return b.Bytes()
}

// bigImage is a one-layer image of bigLayer.
func bigImage(t *testing.T) (v1.Image, v1.Layer) {
	t.Helper()
	z := bigLayer(t)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(z)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	return img, l
}

// warmdBackend uses its own namespace: the CRI plugin adds alias refs to images in k8s.io, which
// would keep a removed image's snapshots alive for a while.
func warmdBackend(t *testing.T, socket string, idx containerd.IndexStore) *containerd.Backend {
	b, err := containerd.New(t.Context(), containerd.Options{Address: socket, Namespace: "warmd-unpack", Snapshotter: "overlayfs", Path: containerd.PathWarmd, Indexes: idx})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if b.Path() != containerd.PathWarmd {
		t.Fatalf("warmd path refused: %s", b.Path())
	}
	return b
}

// TestUnpackIndex: the first pull records the big layer's index, the next decodes it on every core,
// and a tampered index costs only itself: it is dropped, the layer decodes serially, and the image
// is right.
func TestUnpackIndex(t *testing.T) {
	socket := testenv.Containerd(t)
	reg := imagetest.NewRegistry(t, imagetest.Options{})
	imagetest.CleanupDaemon(t, socket, "warmd-unpack", reg)
	img, l := bigImage(t)
	reg.Push(t, "idx/big:v1", img)
	ld, _ := l.Digest()
	ld2, _ := l.DiffID() // a one-layer image's chain ID is its diff ID
	layer := digest.Digest(ld.String())
	idx := &memIndexes{m: map[digest.Digest][]byte{}}
	b := warmdBackend(t, socket, idx)
	ref := reg.Ref("idx/big:v1")

	// pullRemove pulls and removes the image, and returns how its one layer was unpacked as the
	// progress reports it (what warmd status shows).
	pullRemove := func() prefetch.LayerUnpack {
		r, err := b.Resolve(t.Context(), ref)
		if err != nil {
			t.Fatal(err)
		}
		var last prefetch.Progress
		if err := b.Pull(t.Context(), r, func(p prefetch.Progress) { last = p }); err != nil {
			t.Fatal(err)
		}
		if len(last.Layers) != 1 || last.Layers[0].Unpack == nil || !last.Layers[0].Complete || last.Layers[0].FetchSeconds <= 0 {
			t.Fatalf("last progress %+v: want the one layer fetched, with its unpack", last)
		}
		if err := b.Release(t.Context(), r.Name, prefetch.OnRemoveRemove); err != nil {
			t.Fatal(err)
		}
		sn := b.Client().SnapshotService("overlayfs")
		for i := 0; ; i++ {
			_, err := sn.Stat(namespaced(t, "warmd-unpack"), ld2.String())
			if err != nil {
				break
			}
			if i == 100 {
				t.Fatal("the layer's snapshot outlived its image")
			}
			time.Sleep(100 * time.Millisecond)
		}
		return *last.Layers[0].Unpack
	}
	u := pullRemove()
	if s := b.Unpacked(); s.IndexesBuilt != 1 || s.Indexed != 0 {
		t.Fatalf("first pull: %+v, want one index built", s)
	}
	if u.By != "warmd" || u.Decoder != "gzip-warmd" || u.Index != "built" || u.Inflated == 0 || u.Seconds <= 0 {
		t.Fatalf("first pull's layer: %+v, want warmd's serial decoder that built an index", u)
	}
	p, _ := idx.Get(t.Context(), layer)
	size, _ := l.Size()
	x, err := inflate.UnmarshalIndex(p, size)
	if err != nil || len(x.Points) < 2 {
		t.Fatalf("stored index: %v, %d points", err, len(x.Points))
	}
	u = pullRemove()
	if s := b.Unpacked(); s.Indexed != 1 {
		t.Fatalf("second pull: %+v, want the layer decoded from its index", s)
	}
	if u.Decoder != "gzip-warmd-indexed" || u.Index != "used" {
		t.Fatalf("second pull's layer: %+v, want the indexed decoder", u)
	}
	// Tamper: wrong windows give wrong bytes, which the diff ID catches.
	for i := range x.Points {
		w := x.Points[i].Window
		for j := range w {
			w[j] ^= 0x20
		}
	}
	bad, _ := x.MarshalBinary()
	idx.Put(t.Context(), layer, bad)
	if u := pullRemove(); u.Decoder != "gzip-warmd" || u.Index != "discarded" {
		t.Fatalf("tampered index's layer: %+v, want serial with the index discarded", u)
	}
	s := b.Unpacked()
	if s.IndexesDiscarded != 1 || s.Layers != 3 {
		t.Fatalf("tampered index: %+v, want it discarded and the layer decoded serially", s)
	}
	if p2, _ := idx.Get(t.Context(), layer); bytes.Equal(p2, bad) || p2 == nil {
		t.Fatal("the tampered index was kept; a fresh one should replace it")
	}
	// Garbage in the store is refused before any decode.
	idx.Put(t.Context(), layer, []byte("not an index"))
	pullRemove()
	if s := b.Unpacked(); s.IndexesDiscarded != 2 {
		t.Fatalf("garbage index: %+v", s)
	}
}

// TestUnpackWrongDiffID: a config whose diff ID does not match the layer is refused by name, and no
// snapshot of that chain is committed.
func TestUnpackWrongDiffID(t *testing.T) {
	socket := testenv.Containerd(t)
	reg := imagetest.NewRegistry(t, imagetest.Options{})
	imagetest.CleanupDaemon(t, socket, "warmd-unpack", reg)
	img := hardImage(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs[2].Hex = strings.Repeat("ab", 32)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	reg.Push(t, "bad/diffid:v1", img)
	b := warmdBackend(t, socket, &memIndexes{m: map[digest.Digest][]byte{}})
	r, err := b.Resolve(t.Context(), reg.Ref("bad/diffid:v1"))
	if err != nil {
		t.Fatal(err)
	}
	err = b.Pull(t.Context(), r, nil)
	if err == nil || !strings.Contains(err.Error(), "config says") {
		t.Fatalf("pull with a wrong diff ID: %v", err)
	}
	var ids []digest.Digest
	for _, h := range cf.RootFS.DiffIDs {
		ids = append(ids, digest.Digest(h.String()))
	}
	top := identity.ChainID(ids)
	if _, err := b.Client().SnapshotService("overlayfs").Stat(namespaced(t, "warmd-unpack"), top.String()); err == nil {
		t.Fatal("the chain with the wrong layer was committed")
	}
	// The daemon's fetch may have recorded the image; it must not read as unpacked.
	if l, err := b.Lookup(t.Context(), r.Name); err == nil && l.Unpacked {
		t.Fatal("the image of a failed pull reads as unpacked")
	}
}
