package security

// Class 2: one hostile entry in a pod-written compile-cache tree costs only itself. A pod can write
// anything under the tree it mounts; before, one 2,100-deep dir or one name that is not UTF-8 made
// every capture round of the node fail (captured: 0), and the log quoted the whole 2,347-byte path.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHostilePodEntriesCostOnlyThemselves: beside two good kernel dirs, the pod's Triton tree holds a
// name that is not UTF-8, a FIFO, a 2,100-deep dir and an 8 GiB sparse file (16 KiB on disk).
// `warmd cache push` captures and uploads both kernels, leaves the four out and says how many, quotes
// no name past the 128-byte cut, and stays within a bound on time and its own peak RSS; the canary is
// untouched.
func TestHostilePodEntriesCostOnlyThemselves(t *testing.T) {
	w := newCacheWorld(t)
	b := VersityBucket(t)
	cfg := w.CacheConfig(b, b.URL("fleet"))
	tree := w.Tree("triton")
	for _, k := range []string{"GOODKEY1", "GOODKEY2"} {
		must(t, os.MkdirAll(filepath.Join(tree, k), 0o755))
		must(t, os.WriteFile(filepath.Join(tree, k, "kernel.cubin"), []byte("KERNEL-OF-"+k), 0o644))
	}
	must(t, os.MkdirAll(filepath.Join(tree, "HOSTILE"), 0o755))
	must(t, os.WriteFile(filepath.Join(tree, "HOSTILE", "bad\xff\xfename.cubin"), []byte("x"), 0o644))
	must(t, syscall.Mkfifo(filepath.Join(tree, "HOSTILE", "fifo"), 0o644))
	f, err := os.Create(filepath.Join(tree, "HOSTILE", "sparse.bin"))
	must(t, err)
	_, err = f.WriteAt([]byte("x"), 4<<30)
	must(t, err)
	must(t, f.Truncate(8<<30))
	must(t, f.Close())
	deepDir(t, filepath.Join(tree, "DEEP"), 2100)
	// Every entry is old enough for capture to take it now.
	old := time.Now().Add(-time.Hour)
	filepath.Walk(tree, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			os.Chtimes(p, old, old)
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out strings.Builder
	cmd, peak := rssCommand(t, ctx, warmdBin, "cache", "push", "--config", cfg, "--sku", w.SKU)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(cmd.Env, w.Env...)
	cmd.Dir = w.Work
	start := time.Now()
	runErr := cmd.Run()
	took, rss := time.Since(start), peak()
	t.Logf("exit %d, peak RSS %d MiB, %s", cmd.ProcessState.ExitCode(), rss>>20, took.Round(100*time.Millisecond))
	if runErr != nil {
		t.Fatalf("warmd cache push: %v\n%s", runErr, tail(out.String(), 3000))
	}
	if !strings.Contains(out.String(), "left out 4 entries") {
		t.Errorf("the push does not say it left out the 4 hostile entries:\n%s", tail(out.String(), 3000))
	}
	for _, k := range []string{"GOODKEY1", "GOODKEY2"} {
		if hits := bucketHolds(t, b, "fleet/", "KERNEL-OF-"+k); len(hits) == 0 {
			t.Errorf("the good kernel %s beside the hostile entries was not uploaded", k)
		}
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, strings.Repeat("d/", 100)) {
			t.Errorf("a line quotes the deep path past the 128-byte cut (%d bytes): %.300s…", len(l), l)
		}
	}
	if took > time.Minute {
		t.Errorf("took %s, bound 1m (the sparse file must not be read as 8 GiB)", took)
	}
	if rss > 192<<20 {
		t.Errorf("peak RSS %d MiB, bound 192 MiB", rss>>20)
	}
	w.Check()
}

// deepDir makes a chain of n dirs named d under dir, by handle: its path is far past PATH_MAX.
func deepDir(t *testing.T, dir string, n int) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	must(t, err)
	for i := range n {
		if err := syscall.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(fmt.Errorf("level %d: %w", i, err))
		}
		nfd, err := syscall.Openat(fd, "d", syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		syscall.Close(fd)
		must(t, err)
		fd = nfd
	}
	syscall.Close(fd)
}
