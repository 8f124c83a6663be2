package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"warmd.io/warmd/pkg/objstore"
)

// The SKU tree is written by pods: these tests plant links and swap dirs the way a hostile pod would,
// with a dir outside the data dir ("outside") that must stay as it was.

// outsideDir makes a dir beside the data dir holding files a pod would like warmd to touch.
func outsideDir(t *testing.T) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"secret.txt": "OUTSIDE-SECRET-0123456789", "k.cubin": "host file, same name as a kernel"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, files
}

func checkOutside(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(want) {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("outside dir now holds %v, want only %d files", names, len(want))
	}
	for name, content := range want {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != content {
			t.Errorf("outside file %s changed or removed (%v)", name, err)
		}
	}
}

// TestEvictionNeverFollowsAPlantedLink: after capture, the pod swaps the kernel dir for a link to a
// host dir with files of the same names and sizes; eviction frees nothing out there.
func TestEvictionNeverFollowsAPlantedLink(t *testing.T) {
	t.Parallel()
	outside, files := outsideDir(t)
	clock := time.Unix(1_000_000, 0)
	m := newManager(t, skuA, nil, "", func(o *Options) {
		o.Budget, o.MinIdle = 1, time.Minute
		o.Now = func() time.Time { return clock }
	})
	key := filepath.Join(m.Layout().Dir(ComponentTriton), "KEY")
	os.MkdirAll(key, 0o755)
	for name, content := range files {
		os.WriteFile(filepath.Join(key, name), make([]byte, len(content)), 0o644)
	}
	if res, err := m.Capture(context.Background()); err != nil || len(res.Bundles) != 1 {
		t.Fatalf("capture: %+v %v", res, err)
	}
	os.Rename(key, key+".old")
	os.Symlink(outside, key)
	clock = clock.Add(time.Hour)
	res, err := m.Evict()
	if err != nil || len(res.Evicted) != 1 || res.Freed != 0 {
		t.Fatalf("evict: %+v %v (want the bundle evicted with nothing freed through the link)", res, err)
	}
	checkOutside(t, outside, files)
	if fi, err := os.Lstat(key); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the pod's link itself should be left alone: %v", err)
	}
}

// TestExtractionRepairsAComponentLink: a component dir a pod replaced with a link is removed (the
// link, not what it points to) and made a dir again before a restore or import writes into it.
func TestExtractionRepairsAComponentLink(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s objstore.Store, bucket string) {
		outside, files := outsideDir(t)
		a := newManager(t, skuA, s, bucket)
		os.MkdirAll(filepath.Join(a.Layout().Dir(ComponentTriton), "KEY"), 0o755)
		os.WriteFile(filepath.Join(a.Layout().Dir(ComponentTriton), "KEY", "k.cubin"), []byte("kernel"), 0o644)
		if _, err := a.Capture(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Upload(context.Background()); err != nil {
			t.Fatal(err)
		}
		b := newManager(t, skuA, s, bucket)
		dir := b.Layout().Dir(ComponentTriton)
		os.RemoveAll(dir)
		os.Symlink(outside, dir)
		res, err := b.Restore(context.Background())
		if err != nil || len(res.Restored) != 1 {
			t.Fatalf("restore: %+v %v", res, err)
		}
		checkOutside(t, outside, files)
		if got, err := os.ReadFile(filepath.Join(dir, "KEY", "k.cubin")); err != nil || string(got) != "kernel" {
			t.Fatalf("restored kernel: %q %v", got, err)
		}
	})
}

// TestCaptureSkipsLinksAndNeverReadsThroughThem: a link to a secret is not captured (and counted),
// and a kernel dir swapped for a link while captures run never gets a host file into a bundle.
func TestCaptureSkipsLinksAndNeverReadsThroughThem(t *testing.T) {
	t.Parallel()
	outside, files := outsideDir(t)
	s := objstore.NewMemory()
	m := newManager(t, skuA, s, "cache-mem")
	tri := m.Layout().Dir(ComponentTriton)
	os.MkdirAll(filepath.Join(tri, "A"), 0o755)
	os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(tri, "A", "k.cubin"))
	res, err := m.Capture(context.Background())
	if err != nil || len(res.Bundles) != 0 || res.Skipped != 1 {
		t.Fatalf("capture of a link: %+v %v (want nothing captured, one skipped)", res, err)
	}

	var wg sync.WaitGroup
	done := make(chan struct{})
	for i := range 3 {
		dir := filepath.Join(tri, "K"+strings.Repeat("x", i))
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "secret.txt"), bytes.Repeat([]byte("p"), len(files["secret.txt"])), 0o644)
		aside := filepath.Join(tri, "tmp", filepath.Base(dir))
		os.MkdirAll(filepath.Dir(aside), 0o755)
		wg.Add(1)
		go func() { // the pod
			defer wg.Done()
			for {
				select {
				case <-done:
					os.Remove(dir)
					os.Rename(aside, dir)
					return
				default:
				}
				if os.Rename(dir, aside) == nil {
					os.Symlink(outside, dir)
					time.Sleep(200 * time.Microsecond)
					os.Remove(dir)
					os.Rename(aside, dir)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if _, err := m.Capture(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if _, err := m.Upload(context.Background()); err != nil {
		t.Fatal(err)
	}
	secretSum := sum256([]byte(files["secret.txt"]))
	for _, r := range m.Records() {
		for _, e := range r.Manifest.Entries {
			if e.SHA256 == secretSum {
				t.Fatalf("bundle %s holds the outside secret as %s", r.SHA256[:12], e.Path)
			}
		}
	}
	checkOutside(t, outside, files)
}

func sum256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestWatcherNeverWalksThroughALink: a link a pod creates (to a host tree full of dirs) is neither
// watched nor walked: inotify watches are a node-wide resource the kubelet and containerd need.
func TestWatcherNeverWalksThroughALink(t *testing.T) {
	t.Parallel()
	root, host := t.TempDir(), t.TempDir()
	for i := range 5 {
		os.MkdirAll(filepath.Join(host, "usr", strings.Repeat("d", i+1)), 0o755)
	}
	w, err := NewWatcher(openRoot(t, root), time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	os.MkdirAll(filepath.Join(root, "triton", "KEY"), 0o755)
	os.Symlink(host, filepath.Join(root, "triton", "evil"))
	for deadline := time.Now().Add(10 * time.Second); !watching(w, filepath.Join(root, "triton", "KEY")); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the real new dir was never watched")
		}
	}
	time.Sleep(100 * time.Millisecond) // the link's event is handled by now
	for _, p := range w.w.WatchList() {
		if strings.Contains(p, "evil") {
			t.Fatalf("watching %s, through the pod's link", p)
		}
	}
}
