package images_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	digest "github.com/opencontainers/go-digest"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/objstore/objstoretest"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images"
	"warmd.io/warmd/pkg/prefetch/images/containerd"
	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
)

// indexedLayer is one gzip layer of 40 MiB of text: big enough for several checkpoints.
func indexedLayer(t *testing.T) []byte {
	rnd := rand.New(rand.NewPCG(7, 8))
	words := strings.Fields("libtorch cuda kernel flashinfer triton vllm weight shard tensor layer")
	var body strings.Builder
	for body.Len() < 40<<20 {
		body.WriteString(words[rnd.IntN(len(words))])
		body.WriteByte(' ')
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "usr/lib/big.txt", Mode: 0o644, Size: int64(body.Len())})
	io.WriteString(tw, body.String())
	tw.Close()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(tb.Bytes())
	zw.Close()
	return z.Bytes()
}

// TestSharedIndexes: with compileCache.remote set, the first node that inflates a layer shares its
// checkpoint index in the bucket, and a fresh node (empty data dir, its own containerd namespace)
// decodes that layer from the shared index on its first pull. A bad index in the bucket and an
// unreachable bucket each cost only speed: the layer decodes serially and the image is right.
func TestSharedIndexes(t *testing.T) {
	socket := testenv.Containerd(t)
	env := testenv.RequireS3(t)
	t.Setenv("AWS_ACCESS_KEY_ID", env.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", env.SecretKey)
	bucket := objstoretest.NewBucket(t, env, "warmd-gzidx")
	s3 := objstoretest.NewClient(t, env, "", objstore.Options{})

	reg := imagetest.NewRegistry(t, imagetest.Options{})
	z := indexedLayer(t)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(z)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	reg.Push(t, "gzidx/shared:v1", img)
	ld, _ := l.Digest()
	layer := digest.Digest(ld.String())
	key := "fleet/gzindex/sha256-" + layer.Encoded() + ".gzidx"
	ref := reg.Ref("gzidx/shared:v1")

	// node pulls ref as a fresh node (its own data dir and namespace) and returns what warmd's unpacker did.
	node := func(name, endpoint string) containerd.UnpackSummary {
		t.Helper()
		cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: name, DataDir: t.TempDir()}
		cfg.Containerd.Address, cfg.Containerd.Backend, cfg.Containerd.Namespace = socket, "containerd", "warmd-gzidx-"+name
		cfg.CompileCache.Remote = "s3://" + bucket + "/fleet"
		cfg.S3.Endpoint = endpoint
		cfg.Default()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		imagetest.CleanupDaemon(t, socket, cfg.Containerd.Namespace, reg)
		b, err := images.Open(t.Context(), cfg, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
		if err != nil {
			t.Fatal(err)
		}
		cb, ok := b.(*containerd.Backend)
		if !ok || cb.Path() != containerd.PathWarmd {
			t.Fatalf("%s: backend %T, want containerd on the warmd path", name, b)
		}
		r, err := b.Resolve(t.Context(), ref)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Pull(t.Context(), r, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := b.Release(context.Background(), r.Name, prefetch.OnRemoveRemove); err != nil {
			t.Fatal(err)
		}
		s := cb.Unpacked()
		b.Close() // waits for the index upload
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "images/gzindex", "sha256-"+layer.Encoded()+".gzidx")); err != nil && s.IndexesDiscarded == 0 {
			t.Errorf("%s: the layer's index is not kept on the node: %v", name, err)
		}
		return s
	}

	if s := node("first", env.Endpoint); s.IndexesBuilt != 1 || s.Indexed != 0 {
		t.Fatalf("first node: %+v, want the layer decoded serially and its index built", s)
	}
	o, err := s3.Head(t.Context(), bucket, key)
	if err != nil || o.Size == 0 {
		t.Fatalf("the first node did not share the index at s3://%s/%s: %v", bucket, key, err)
	}
	if s := node("fresh", env.Endpoint); s.Indexed != 1 || s.IndexesBuilt != 0 {
		t.Fatalf("fresh node: %+v, want the layer decoded from the shared index", s)
	}

	// A bad index in the bucket (a byte flipped in every window): the fresh node's decode fails its
	// diff ID or the index's own checks, the index is dropped here, and the layer decodes serially.
	var good bytes.Buffer
	if _, err := s3.Get(t.Context(), bucket, key, &good); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good.Bytes())
	for i := len(bad) / 2; i < len(bad); i += 4096 {
		bad[i] ^= 0x5a
	}
	if err := s3.Put(t.Context(), bucket, key, bytes.NewReader(bad), int64(len(bad)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if s := node("hostile", env.Endpoint); s.Indexed != 0 && s.IndexesDiscarded == 0 {
		t.Fatalf("node given a bad index: %+v, want it discarded and the layer decoded serially", s)
	}

	// An unreachable bucket: the node decodes serially, builds its own index and still pulls.
	if s := node("offline", "http://127.0.0.1:1"); s.IndexesBuilt != 1 {
		t.Fatalf("node without the bucket: %+v, want the layer decoded serially", s)
	}
}
