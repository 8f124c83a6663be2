package cache

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCaptureSkipsHostileEntries: a 2,100-deep dir, a name that is not UTF-8, a FIFO, a sparse
// 2 GiB file and a link in a pod's tree are each skipped and counted; every other file is captured.
func TestCaptureSkipsHostileEntries(t *testing.T) {
	m := newManager(t, skuA, nil, "")
	tree := filepath.Join(m.Layout().Root(), ComponentTriton)
	if err := os.MkdirAll(filepath.Join(tree, "KEY1"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(tree, "KEY1", "k.cubin"), []byte("kernel"), 0o644)
	os.WriteFile(filepath.Join(tree, "KEY1", "bad\xff\xfename"), []byte("x"), 0o644)
	syscall.Mkfifo(filepath.Join(tree, "KEY1", "fifo"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(tree, "KEY1", "link"))
	f, _ := os.Create(filepath.Join(tree, "KEY1", "sparse.bin"))
	f.WriteAt([]byte("x"), 1<<30)
	f.Truncate(2 << 30)
	f.Close()
	deep := filepath.Join(tree, "DEEP")
	os.Mkdir(deep, 0o755)
	fd, err := syscall.Open(deep, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 2100 { // by handle: the path is far past PATH_MAX
		if err := syscall.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		nfd, err := syscall.Openat(fd, "d", syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		syscall.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = nfd
	}
	syscall.Close(fd)
	res, err := m.Capture(context.Background())
	if err != nil {
		t.Fatalf("capture failed: %v", err)
	}
	got := capturedPaths(m)
	if len(res.Bundles) == 0 || !got["triton/KEY1/k.cubin"] || len(got) != 1 {
		t.Fatalf("captured %v, want only triton/KEY1/k.cubin", got)
	}
	if res.Skipped != 5 { // bad name, fifo, link, too-deep dir, sparse file
		t.Errorf("skipped %d entries, want 5", res.Skipped)
	}
	for _, r := range m.Records() {
		for _, e := range r.Manifest.Entries {
			if strings.Contains(e.Path, "sparse") {
				t.Errorf("sparse file captured: %s", e.Path)
			}
		}
	}
}
