package cache

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"warmd.io/warmd/pkg/cache/bundle"
	"warmd.io/warmd/pkg/cache/cachetest"
)

func TestCheckSKU(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sku string
		ok  bool
	}{
		{skuA, true}, {"", false}, {"none", false}, {"unknown", false}, {"../x", false},
		{"a/b", false}, {"node", false}, {".hidden", false}, {"a..b", false},
	} {
		t.Run(tc.sku, func(t *testing.T) {
			if err := CheckSKU(tc.sku); (err == nil) != tc.ok {
				t.Fatalf("CheckSKU(%q) = %v, want ok=%v", tc.sku, err, tc.ok)
			}
		})
	}
}

func TestLayoutAndNodeLink(t *testing.T) {
	t.Parallel()
	m := newManager(t, skuA, nil, "")
	for _, c := range Components {
		if st, err := os.Stat(m.Layout().Dir(c)); err != nil || !st.IsDir() {
			t.Fatalf("component dir %s missing: %v", c, err)
		}
	}
	link := filepath.Join(m.Layout().Base, NodeLink)
	if got, err := os.Readlink(link); err != nil || got != skuA {
		t.Fatalf("%s -> %q (%v), want %s", link, got, err, skuA)
	}
	env, err := PodEnv(PodMountPath, "")
	if err != nil || len(env) != 4 || env[3].Name != "FLASHINFER_WORKSPACE_BASE" || env[3].Value != PodMountPath+"/flashinfer" {
		t.Fatalf("pod env %+v", env)
	}
}

func TestIgnoredPaths(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path string
		want bool
	}{
		{".cache/flashinfer/0.4.1/90a/cached_ops/op/op.so", false},
		{".cache/flashinfer/0.4.1/90a/cached_ops/tmp/op.lock", true},
		{"ABCDEF/tmp.pid_12_34/kernel.cubin", true},
		{"ABCDEF/kernel.cubin", false},
		{"x/.op.so.warmd-tmp-0a1b", true},
		{".cache/flashinfer/0.4.1/90a/flashinfer_jit.log", true},
		{"torch_compile_cache/abc/rank_0_0/backbone/vllm_compile_cache.py", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			if got := ignored(tc.path); got != tc.want {
				t.Fatalf("ignored(%q) = %v, want %v", tc.path, got, tc.want)
			}
		})
	}
}

// TestCaptureSkipsIncompleteFiles runs a capture while a FlashInfer build is still writing its .so,
// Triton is still writing into its tmp dir, and lock files exist: only complete files are captured,
// and each of the others is captured whole once it is complete.
func TestCaptureSkipsIncompleteFiles(t *testing.T) {
	t.Parallel()
	m := newManager(t, skuA, nil, "")
	root := m.Layout().Root()
	if _, err := cachetest.Write(root, cachetest.Small); err != nil {
		t.Fatal(err)
	}
	opDir := filepath.Join(root, "flashinfer/.cache/flashinfer/0.4.1/90a/cached_ops/new_op")
	os.MkdirAll(opDir, 0o755)
	so, err := os.Create(filepath.Join(opDir, "new_op.so"))
	if err != nil {
		t.Fatal(err)
	}
	so.Write(make([]byte, 100<<10)) // half written, still open
	tritonKey := filepath.Join(root, "triton/NEWKERNELKEY")
	tmpDir := filepath.Join(tritonKey, "tmp.pid_4242_1")
	os.MkdirAll(tmpDir, 0o755)
	os.WriteFile(filepath.Join(tmpDir, "k.cubin"), []byte("complete cubin, not yet renamed"), 0o644)

	res, err := m.Capture(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := capturedPaths(m)
	if len(res.Bundles) == 0 || len(got) < 50 {
		t.Fatalf("captured %d bundles / %d files from the complete tree", len(res.Bundles), len(got))
	}
	for p := range got {
		if strings.Contains(p, "new_op.so") || strings.Contains(p, "tmp.pid") || strings.HasSuffix(p, ".lock") || strings.HasSuffix(p, ".log") {
			t.Fatalf("captured incomplete or temp file %s", p)
		}
	}
	if res.Pending != 1 {
		t.Fatalf("pending = %d, want 1 (the open .so)", res.Pending)
	}
	for _, r := range res.Bundles {
		if r.Manifest.Component == ComponentFlashInfer && (len(r.Manifest.Versions["flashinfer"]) != 1 || r.Manifest.Versions["flashinfer"][0] != "0.4.1") {
			t.Fatalf("flashinfer bundle versions %v, want flashinfer 0.4.1", r.Manifest.Versions)
		}
		if r.Manifest.Component == ComponentVLLM && len(r.Manifest.Versions["vllm-cache-hash"]) != 1 {
			t.Fatalf("vllm bundle versions %v, want one cache hash", r.Manifest.Versions)
		}
	}

	// The writer finishes and Triton renames its tmp dir into place: now both are captured, whole.
	so.Write(make([]byte, 100<<10))
	so.Close()
	os.Rename(filepath.Join(tmpDir, "k.cubin"), filepath.Join(tritonKey, "k.cubin"))
	os.Remove(tmpDir)
	res, err = m.Capture(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var sizes = map[string]int64{}
	for _, r := range res.Bundles {
		for _, e := range r.Manifest.Entries {
			sizes[r.Manifest.Component+"/"+e.Path] = e.Size
		}
	}
	if sizes["flashinfer/.cache/flashinfer/0.4.1/90a/cached_ops/new_op/new_op.so"] != 200<<10 || sizes["triton/NEWKERNELKEY/k.cubin"] == 0 {
		t.Fatalf("second capture: %v", sizes)
	}
	if res.Pending != 0 || len(res.Bundles) != 2 {
		t.Fatalf("second capture: %d bundles, %d pending; want 2 new bundles and nothing pending", len(res.Bundles), res.Pending)
	}
	// A third capture finds nothing new.
	if res, _ := m.Capture(context.Background()); len(res.Bundles) != 0 {
		t.Fatalf("third capture made %d bundles from an unchanged tree", len(res.Bundles))
	}
}

// TestRecordsSurviveRestart: a new manager over the same data dir knows what is captured.
func TestRecordsSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newManager(t, skuA, nil, "", func(o *Options) { o.DataDir = dir })
	cachetest.Write(m.Layout().Root(), cachetest.Small)
	if _, err := m.Capture(context.Background()); err != nil {
		t.Fatal(err)
	}
	m2 := newManager(t, skuA, nil, "", func(o *Options) { o.DataDir = dir })
	if len(m2.Records()) != len(m.Records()) {
		t.Fatalf("reloaded %d records, had %d", len(m2.Records()), len(m.Records()))
	}
	if res, _ := m2.Capture(context.Background()); len(res.Bundles) != 0 {
		t.Fatalf("capture after restart re-bundled %d bundles", len(res.Bundles))
	}
}

// TestWatcherQuietPeriod: dirs created after the watch started are watched, and the tree is due
// for capture only after the quiet period; an overflow marks it due again.
func TestWatcherQuietPeriod(t *testing.T) {
	root := t.TempDir()
	clock := time.Unix(1000, 0)
	now := func() time.Time { return clock }
	w, err := NewWatcher(openRoot(t, root), time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	clock = clock.Add(2 * time.Minute)
	if !w.Due() {
		t.Fatal("initial tree not due after the quiet period")
	}
	deep := filepath.Join(root, "triton", "KEY1", "sub")
	os.MkdirAll(deep, 0o755)
	// Wait (bounded) until the new dirs are watched, proven by an event from inside them.
	for deadline := time.Now().Add(10 * time.Second); ; {
		os.WriteFile(filepath.Join(deep, "probe"), []byte("x"), 0o644)
		time.Sleep(20 * time.Millisecond)
		if watching(w, deep) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("new nested dir never watched")
		}
	}
	w.mu.Lock()
	w.dirty = false
	w.mu.Unlock()
	os.WriteFile(filepath.Join(deep, "k.cubin"), []byte("kernel"), 0o644)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		w.mu.Lock()
		d := w.dirty
		w.mu.Unlock()
		if d {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("write in a nested dir produced no event")
		}
	}
	if w.Due() {
		t.Fatal("due before the quiet period passed")
	}
	clock = clock.Add(61 * time.Second)
	if !w.Due() || w.Due() {
		t.Fatal("want due exactly once after the quiet period")
	}
	w.handleError(fsnotify.ErrEventOverflow)
	clock = clock.Add(61 * time.Second)
	if !w.Due() || w.Overflows != 1 {
		t.Fatalf("overflow: due=false or overflows=%d", w.Overflows)
	}
}

func watching(w *Watcher, dir string) bool {
	for _, p := range w.w.WatchList() {
		if p == dir {
			return true
		}
	}
	return false
}

// TestManagerSweepsTempFilesAtStart: temp files a killed restore left behind are removed when the
// manager opens the tree, so neither pods nor capture ever see them.
func TestManagerSweepsTempFilesAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newManager(t, skuA, nil, "", func(o *Options) { o.DataDir = dir })
	d := filepath.Join(m.Layout().Dir(ComponentTriton), "KEY")
	os.MkdirAll(d, 0o755)
	tmp := filepath.Join(d, ".k.cubin"+bundle.TempMarker+"0011aa")
	os.WriteFile(tmp, []byte("half"), 0o644)
	newManager(t, skuA, nil, "", func(o *Options) { o.DataDir = dir })
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("temp file survived the restart: %v", err)
	}
}
