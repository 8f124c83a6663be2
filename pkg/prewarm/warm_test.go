package prewarm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warmd.io/warmd/internal/pagecachetest"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/hfcache"
)

const mib = 1 << 20

// writeDirect writes size bytes of a pattern to path with O_DIRECT, as the weights engine publishes,
// so none of it lands in the page cache; then drops whatever did (e.g. on a filesystem that ignored
// O_DIRECT) with POSIX_FADV_DONTNEED.
func writeDirect(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	buf, err := unix.Mmap(-1, 0, mib, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE) // page-aligned
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	for i := range buf {
		buf[i] = byte(i*7 + len(path))
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_DIRECT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		// Fails under CI (make test's TMPDIR is on a disk that supports O_DIRECT); skips elsewhere.
		testenv.Unavailable(t, fmt.Sprintf("O_DIRECT not supported under %s (%v): set TMPDIR to a disk file system, as make test does", filepath.Dir(path), err))
		return
	}
	defer unix.Close(fd)
	for off := 0; off < size; off += mib {
		if _, err := unix.Pwrite(fd, buf[:min(mib, size-off)], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	drop(t, path)
}

// drop evicts only this file's pages: what the benchmark does too (never drop_caches).
func drop(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// model lays out a published snapshot as the weights engine does: blobs written with O_DIRECT, and
// snapshots/main/<name> as relative links to ../../blobs/<blob>. It returns the cache root and the
// blob paths by file name.
func layout(t *testing.T, sizes map[string]int) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	return dir, publish(t, dir, "models--org--m", sizes)
}

// publish lays out one model dir below the cache root dir and returns its blobs by file name.
func publish(t *testing.T, dir, modelDir string, sizes map[string]int) map[string]string {
	t.Helper()
	md := filepath.Join(dir, modelDir)
	blobs := map[string]string{}
	for name, size := range sizes {
		blobName := "blob-" + strings.ReplaceAll(name, "/", "-")
		blob := filepath.Join(md, "blobs", blobName)
		writeDirect(t, blob, size)
		link := filepath.Join(md, "snapshots", "main", name)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(strings.Repeat("../", strings.Count(name, "/")+2)+"blobs/"+blobName, link); err != nil {
			t.Fatal(err)
		}
		blobs[name] = blob
	}
	return blobs
}

func open(t *testing.T, dir string) *fsroot.Root {
	t.Helper()
	r, err := fsroot.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func snapshot(t *testing.T) fsroot.Path {
	t.Helper()
	p, err := hfcache.SnapshotDir("org/m", "main")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWarmLoadsPageCache is the point of the package: after Warm, the pages of files written with
// O_DIRECT (cold) are in the page cache, as mincore(2) reports.
func TestWarmLoadsPageCache(t *testing.T) {
	dir, blobs := layout(t, map[string]int{"model-00001-of-00002.safetensors": 24 * mib,
		"model-00002-of-00002.safetensors": 16 * mib, "sub/config.json": 4096})
	for name, b := range blobs {
		if r := pagecachetest.Resident(t, b); r > 0.05 {
			t.Fatalf("%s is %.0f%% resident after DONTNEED; the test cannot tell cold from warm here", name, r*100)
		}
	}
	res, err := Warm(context.Background(), open(t, dir), snapshot(t), 1<<40, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(40*mib + 4096)
	if res.Files != 3 || res.Read != 3 || res.Bytes != want || res.Total != want || res.BudgetHit {
		t.Fatalf("result %+v, want 3 files, %d bytes, no budget hit", res, want)
	}
	for name, b := range blobs {
		if r := pagecachetest.Resident(t, b); r < 0.95 {
			t.Errorf("%s is only %.0f%% resident after Warm", name, r*100)
		}
	}
}

// TestWarmStopsAtBudget: files are read in name order until the budget; later files stay cold. The
// file where the budget ends is resident past it by at most the kernel's readahead (read_ahead_kb,
// doubled by POSIX_FADV_SEQUENTIAL; 8 MiB on virtio disks), so the files are large against it.
func TestWarmStopsAtBudget(t *testing.T) {
	dir, blobs := layout(t, map[string]int{"a.safetensors": 48 * mib, "b.safetensors": 48 * mib, "c.safetensors": 48 * mib})
	var seen int64
	res, err := Warm(context.Background(), open(t, dir), snapshot(t), 64*mib, func(n int64) { seen += n })
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != 64*mib || seen != res.Bytes || !res.BudgetHit || res.Read != 2 || res.Total != 144*mib {
		t.Fatalf("result %+v (onBytes saw %d), want 64 MiB read from 2 files and the budget hit", res, seen)
	}
	if r := pagecachetest.Resident(t, blobs["a.safetensors"]); r < 0.95 {
		t.Errorf("a is %.0f%% resident, want all", r*100)
	}
	if r := pagecachetest.Resident(t, blobs["b.safetensors"]); r < 0.30 || r > 0.70 {
		t.Errorf("b is %.0f%% resident, want its first third (where the budget ends) plus at most a readahead window", r*100)
	}
	if r := pagecachetest.Resident(t, blobs["c.safetensors"]); r > 0.05 {
		t.Errorf("c is %.0f%% resident, want none: it is past the budget", r*100)
	}
}

// TestWarmCancelled: a cancelled context stops the run before it reads (the pod went away).
func TestWarmCancelled(t *testing.T) {
	dir, blobs := layout(t, map[string]int{"a.safetensors": 8 * mib})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := Warm(ctx, open(t, dir), snapshot(t), 1<<40, nil)
	if !errors.Is(err, context.Canceled) || res.Bytes != 0 {
		t.Fatalf("Warm on a cancelled context: %+v, %v", res, err)
	}
	if r := pagecachetest.Resident(t, blobs["a.safetensors"]); r > 0.05 {
		t.Errorf("a is %.0f%% resident after a cancelled run", r*100)
	}
}

// TestListRefusesLinksOutOfBlobs: a snapshot link is followed only into its own model's blobs/.
// Anything else (another model, staging, above the root, an absolute path, a link in blobs/) is an
// error, and nothing is read.
func TestListRefusesLinksOutOfBlobs(t *testing.T) {
	for _, tc := range []struct{ name, target string }{
		{"another model", "../../../models--org--other/blobs/x"},
		{"staging", "../../../.staging/models--org--m@main/x"},
		{"above the root", "../../../../etc/passwd"},
		{"absolute", "/etc/passwd"},
		{"the snapshot itself", "./other"},
		{"a link in blobs", "../../blobs/link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := layout(t, map[string]int{"a.safetensors": 4096})
			md := filepath.Join(dir, "models--org--m")
			for _, p := range []string{filepath.Join(dir, "models--org--other/blobs/x"), filepath.Join(dir, ".staging/models--org--m@main/x"),
				filepath.Join(md, "snapshots/main/other")} {
				writeDirect(t, p, 4096)
			}
			if err := os.Symlink("blob-a.safetensors", filepath.Join(md, "blobs/link")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(tc.target, filepath.Join(md, "snapshots/main/z.safetensors")); err != nil {
				t.Fatal(err)
			}
			res, err := Warm(context.Background(), open(t, dir), snapshot(t), 1<<40, nil)
			if err == nil || res.Bytes != 0 {
				t.Fatalf("Warm followed %s: %+v, %v", tc.target, res, err)
			}
		})
	}
}

func TestNotPublished(t *testing.T) {
	_, err := Warm(context.Background(), open(t, t.TempDir()), snapshot(t), 1<<40, nil)
	if !errors.Is(err, hfcache.ErrNotPublished) {
		t.Fatalf("Warm of a missing snapshot: %v, want hfcache.ErrNotPublished", err)
	}
	if _, err := hfcache.SnapshotDir("org/m", "../x"); err == nil {
		t.Fatal("SnapshotDir accepted a revision with a slash")
	}
}

// TestSharedBlobReadOnce: two names linking to one blob are read once.
func TestSharedBlobReadOnce(t *testing.T) {
	dir, _ := layout(t, map[string]int{"a.safetensors": 8 * mib})
	if err := os.Symlink("../../blobs/blob-a.safetensors", filepath.Join(dir, "models--org--m/snapshots/main/b.safetensors")); err != nil {
		t.Fatal(err)
	}
	res, err := Warm(context.Background(), open(t, dir), snapshot(t), 1<<40, nil)
	if err != nil || res.Files != 1 || res.Bytes != 8*mib {
		t.Fatalf("%+v, %v: want one file of 8 MiB", res, err)
	}
}
