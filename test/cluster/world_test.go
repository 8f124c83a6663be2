package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"k8s.io/apimachinery/pkg/util/intstr"

	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/internal/testenv/cluster"
)

// replayedLog is the real vLLM startup the stand-in container prints (a 7B cold start, vLLM 0.10.2).
const replayedLog = "../../pkg/phases/testdata/seed-7b-cold.log"

// model is one model the test puts in S3 and warmd keeps warm.
type model struct {
	name, revision, bucket, prefix string
	// sums is "sha256  name" per file (sha256sum format), what the stand-in checks.
	sums  string
	size  int64
	files *fixtures.Model
}

// world is what the test sets up around warmd: images in the node's registry, models in its S3.
type world struct {
	c *cluster.Cluster
	// vllmImage is the multi-layer stand-in for vllm/vllm-openai (test/cluster/standin); warmd keeps it warm.
	vllmImage string
	// extraImage is an extra image warmd pins (NodeConfig images); nothing runs it.
	extraImage string
	// unpinnedImage is pulled by the test and pinned by nobody: the kubelet's image GC may take it.
	unpinnedImage string
	// schedulerImage runs the second kube-scheduler (built from the same v1.37.2 binary the node runs).
	schedulerImage string
	// gcFrom is when the kubelet restarted with lowered image GC thresholds.
	gcFrom          time.Time
	qwen7b, qwen05b model
}

func newWorld(t *testing.T, c *cluster.Cluster) *world {
	t.Helper()
	w := &world{
		c:              c,
		vllmImage:      c.Registry + "/vllm/vllm-openai:v0.11.0",
		extraImage:     c.Registry + "/e2e/pinned-extra:v1",
		unpinnedImage:  c.Registry + "/e2e/unpinned:v1",
		schedulerImage: c.Registry + "/e2e/kube-scheduler:v1.37.2",
	}
	logData := readFile(t, replayedLog)
	binData := buildStandin(t)
	// Four layers, as a real image has several: the server, the recorded log, and two of "libraries".
	rng := rand.New(rand.NewPCG(1, 2))
	layers := [][]tarFile{
		{{"standin", binData, 0o755}},
		{{"replay/vllm.log", logData, 0o644}},
		{{"usr/lib/python3/dist-packages/torch/lib/libtorch_stub.so", randomBytes(rng, 6<<20), 0o644}},
		{{"usr/lib/python3/dist-packages/vllm/_C.so", randomBytes(rng, 3<<20), 0o644}},
	}
	pushImage(t, w.vllmImage, layers, []string{"/standin"})
	pushImage(t, w.schedulerImage, [][]tarFile{{{"usr/local/bin/kube-scheduler", readFile(t, filepath.Join(c.Bin, "kube-scheduler")), 0o755}}},
		[]string{"/usr/local/bin/kube-scheduler"})
	if _, err := fixtures.PushRandomImage(w.extraImage, 512<<10, 2); err != nil {
		t.Fatalf("push %s: %v", w.extraImage, err)
	}
	if _, err := fixtures.PushRandomImage(w.unpinnedImage, 768<<10, 2); err != nil {
		t.Fatalf("push %s: %v", w.unpinnedImage, err)
	}
	// Into the kubelet's image store, then restart the kubelet with its image GC thresholds lowered so
	// every GC pass must free space. It sees the image at its start; it may collect it once the image
	// is older than imageMinimumGCAge (which 0 defaults to 2m), at its next pass 5 minutes later (the
	// pass at start finds the image file system stats not ready yet): the GC step comes last.
	if out, err := c.Ctr(context.Background(), "images", "pull", "--plain-http", w.unpinnedImage); err != nil {
		t.Fatalf("pull %s: %v\n%s", w.unpinnedImage, err, out)
	}
	if err := c.RestartKubelet(context.Background(), 1, 0); err != nil {
		t.Fatal(err)
	}
	w.gcFrom = time.Now()

	// The example Deployment serves Qwen/Qwen2.5-7B-Instruct at this revision (its --model path).
	w.qwen7b = newModel(t, "Qwen/Qwen2.5-7B-Instruct", "a09a35458c702b33eeacc393d103063234e8bc28", "e2e-models", "qwen7b",
		fixtures.ModelSpec{Shards: 3, TensorsA: 4, BytesPerTensor: 512 << 10, Seed: 7})
	w.qwen05b = newModel(t, "Qwen/Qwen2.5-0.5B-Instruct", "main", "e2e-models", "qwen05b",
		fixtures.ModelSpec{Shards: 1, TensorsA: 4, BytesPerTensor: 256 << 10, Seed: 8})
	for _, b := range []string{"e2e-models", "e2e-compile-cache"} {
		if err := os.MkdirAll(filepath.Join(c.S3.Root, b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// buildStandin compiles test/cluster/standin statically (the images have no libc) and returns it.
func buildStandin(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "standin")
	build := exec.Command("go", "build", "-o", out, "./standin")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the vLLM stand-in: %v\n%s", err, b)
	}
	return readFile(t, out)
}

// sha256Line is one sha256sum line for data named name.
func sha256Line(data []byte, name string) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:]) + "  " + name + "\n"
}

func intOrString(port int) intstr.IntOrString { return intstr.FromInt32(int32(port)) }

type tarFile struct {
	name string
	data []byte
	mode int64
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pushImage pushes an image of the given layers (one tar each) with an entrypoint, over plain HTTP.
func pushImage(t *testing.T, ref string, layers [][]tarFile, entrypoint []string) {
	t.Helper()
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: runtime.GOARCH, OS: "linux", RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{Entrypoint: entrypoint, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, files := range layers {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, f := range files {
			if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write(f.data); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatal(err)
		}
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// newModel generates a model's files and their sums; upload puts them in S3.
func newModel(t *testing.T, modelName, revision, bucket, prefix string, spec fixtures.ModelSpec) model {
	t.Helper()
	m, err := fixtures.NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	names := m.Names()
	sort.Strings(names)
	var sums strings.Builder
	var size int64
	for _, n := range names {
		sums.WriteString(sha256Line(m.Files[n], n))
		size += int64(len(m.Files[n]))
	}
	return model{name: modelName, revision: revision, bucket: bucket, prefix: prefix, sums: sums.String(), size: size, files: m}
}

// upload writes the model's files as objects (files under the versitygw posix root are objects).
func (w *world) upload(t *testing.T, m model) {
	t.Helper()
	if err := m.files.WriteDir(filepath.Join(w.c.S3.Root, m.bucket, m.prefix)); err != nil {
		t.Fatal(err)
	}
}

// nodeConfig is the NodeConfig the test installs; with05b adds the second model (the ConfigMap edit).
func (w *world) nodeConfig(with05b bool) string {
	models := []model{w.qwen7b}
	if with05b {
		models = append(models, w.qwen05b)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: warmd.io/v1alpha1
kind: NodeConfig
s3:
  endpoint: %s
models:
`, w.c.S3.Endpoint)
	for _, m := range models {
		fmt.Fprintf(&b, "  - name: %s\n    source: s3://%s/%s/\n    revision: %s\n    image: %s\n", m.name, m.bucket, m.prefix, m.revision, w.vllmImage)
	}
	fmt.Fprintf(&b, `images:
  - ref: %s
imagePull:
  plainHTTP: [%q]
weights:
  concurrency: 4
  chunkSize: 1Mi
compileCache:
  remote: s3://e2e-compile-cache/fleet
  quietPeriod: 2s
readiness:
  startupTaint: true
  resync: 30s
`, w.extraImage, w.c.Registry)
	return b.String()
}
