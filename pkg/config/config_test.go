package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseExample(t *testing.T) {
	c, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	if got := c.Models[0].TensorParallelSize; got != 1 {
		t.Errorf("tensorParallelSize = %d", got)
	}
	if c.API.Socket != "/var/lib/warmd/warmd.sock" {
		t.Errorf("socket default = %q, want under dataDir", c.API.Socket)
	}
	if !*c.S3.UsePathStyle {
		t.Error("path-style addressing should default on with a custom endpoint")
	}
	if c.Weights.Budget.Value() != 500<<30 {
		t.Errorf("budget = %d", c.Weights.Budget.Value())
	}
	if c.Weights.ChunkSize.Value() != 16<<20 || c.Weights.Concurrency != 16 || c.ImagePull.OnRemove != "unpin" || c.Weights.PageCache != PageCacheBypass {
		t.Errorf("defaults not filled: %+v %+v", c.Weights, c.ImagePull)
	}
}

func TestDefaultNodeNameFromEnv(t *testing.T) {
	t.Setenv("NODE_NAME", "from-downward-api")
	c, err := Parse([]byte("apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeName != "from-downward-api" {
		t.Errorf("nodeName = %q", c.NodeName)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	bad := `apiVersion: warmd.io/v1alpha1
kind: NodeConfig
dataDir: relative/dir
models:
- name: Qwen/Qwen2.5-7B
  source: s4://x
- name: ""
  source: s3://
  tensorParallelSize: -2
imagePull:
  onRemove: delete
weights:
  chunkSize: 1Ki
  pageCache: readBack
api:
  listen: "9400"
containerd:
  unpack: sideways
`
	_, err := Parse([]byte(bad))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want *ValidationError, got %v", err)
	}
	want := []string{
		`dataDir: "relative/dir" is not an absolute path`,
		`models[0].source: "s4://x": scheme must be s3 or file`,
		`models[1].name: is empty`,
		`models[1].source: "s3://" has no bucket`,
		`models[1].tensorParallelSize: -2 is outside 1..64`,
		`imagePull.onRemove: "delete" is not a policy (use unpin, keep or remove)`,
		`weights.chunkSize: 1Ki is outside 1Mi..1Gi`,
		`weights.pageCache: "readBack" is not a page-cache mode (use bypass (O_DIRECT, the default) or keep)`,
		`api.listen: "9400" is not host:port`,
		`containerd.unpack: "sideways" is not a way to unpack (use warmd`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
	if len(ve.Problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(ve.Problems), len(want), msg)
	}
}

func TestStrictDecoding(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"unknown field", "apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nmodel: []\n", `model: unknown field (did you mean models?)`},
		{"wrong kind", "apiVersion: warmd.io/v1alpha1\nkind: Config\n", `kind: "Config" is not supported`},
		{"empty", "\n", "config is empty"},
		{"wrong type", "apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nweights: {concurrency: many}\n", "concurrency"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestWatchConfigMapSwap reproduces how the kubelet updates a mounted ConfigMap: the file is a symlink
// through ..data, which is swapped atomically to a new timestamped dir. The watcher must see the new
// content, reject a broken edit, and then accept a fixed one.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	write := func(ts, content string) {
		t.Helper()
		d := filepath.Join(dir, ts)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "config.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(ts, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	base := "apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nnodeName: n1\n"
	write("..2026_01_01_00_00_00.1", base)
	if err := os.Symlink("..data/config.yaml", filepath.Join(dir, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	type result struct {
		cfg *NodeConfig
		err error
	}
	var mu sync.Mutex
	var got []result
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- Watch(ctx, filepath.Join(dir, "config.yaml"), []byte(base), time.Hour, func(c *NodeConfig, err error) {
			mu.Lock()
			got = append(got, result{c, err})
			mu.Unlock()
		})
	}()
	waitFor := func(n int) []result {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			if len(got) >= n {
				out := append([]result(nil), got...)
				mu.Unlock()
				return out
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("watcher reported %d changes, want %d", len(got), n)
		return nil
	}
	time.Sleep(100 * time.Millisecond) // let the watch start
	write("..2026_01_01_00_00_00.2", base+"dataDir: /srv/warmd\n")
	r := waitFor(1)
	if r[0].err != nil || r[0].cfg.DataDir != "/srv/warmd" {
		t.Fatalf("first change: %+v", r[0])
	}
	write("..2026_01_01_00_00_00.3", base+"dataDir: nope\n")
	r = waitFor(2)
	if r[1].err == nil || !strings.Contains(r[1].err.Error(), "dataDir") {
		t.Fatalf("broken change not rejected with its field: %+v", r[1])
	}
	write("..2026_01_01_00_00_00.4", base+"dataDir: /srv/fixed\n")
	r = waitFor(3)
	if r[2].err != nil || r[2].cfg.DataDir != "/srv/fixed" {
		t.Fatalf("fixed change: %+v", r[2])
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestValidationErrorWithout(t *testing.T) {
	e := &ValidationError{Problems: []FieldError{{Path: "api.socket", Msg: "long"}, {Path: "dataDir", Msg: "relative"}}}
	rest := e.Without("api.socket")
	var ve *ValidationError
	if !errors.As(rest, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Path != "dataDir" {
		t.Fatalf("Without(api.socket) = %v, want only the dataDir problem", rest)
	}
	if err := ve.Without("dataDir"); err != nil {
		t.Errorf("Without every field = %v, want nil", err)
	}
}

// TestModelsEqualUpToCaseRefused: two entries whose ids differ only in case are one model on the Hub
// and would share one compile-cache tree (model.Slug lower-cases); config refuses the second.
func TestModelsEqualUpToCaseRefused(t *testing.T) {
	cfg := `apiVersion: warmd.io/v1alpha1
kind: NodeConfig
models:
- name: Qwen/Qwen2.5-7B-Instruct
  source: s3://b/a/
- name: qwen/qwen2.5-7b-instruct
  source: s3://b/b/
`
	_, err := Parse([]byte(cfg))
	if err == nil || !strings.Contains(err.Error(), `models[1].name: "qwen/qwen2.5-7b-instruct" is models[0] ("Qwen/Qwen2.5-7B-Instruct") in another case`) {
		t.Fatalf("Parse = %v, want models[1] refused as models[0] in another case", err)
	}
}
