package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteLayer checks a generated layer is one ordinary gzip member holding a valid tar, that its
// recorded digests and sizes are the real ones, that it compresses about 2:1, and that the same
// seed gives the same bytes.
func TestWriteLayer(t *testing.T) {
	dir := t.TempDir()
	a, err := writeLayer(filepath.Join(dir, "a.tar.gz"), 7, 5<<20, 42)
	if err != nil {
		t.Fatal(err)
	}
	b, err := writeLayer(filepath.Join(dir, "b.tar.gz"), 7, 5<<20, 42)
	if err != nil {
		t.Fatal(err)
	}
	if a.digest != b.digest || a.diff != b.diff {
		t.Fatalf("same seed, different layers: %v/%v vs %v/%v", a.digest, a.diff, b.digest, b.diff)
	}
	f, err := os.Open(a.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ch := sha256.New()
	zr, err := gzip.NewReader(io.TeeReader(f, ch))
	if err != nil {
		t.Fatal(err)
	}
	zr.Multistream(false) // one member, as real layers are
	uh := sha256.New()
	tr := tar.NewReader(io.TeeReader(zr, uh))
	files := 0
	for {
		_, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			t.Fatal(err)
		}
		files++
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(f); len(rest) != 0 {
		t.Fatalf("%d bytes after the gzip member", len(rest))
	}
	if got := fmt.Sprintf("%x", uh.Sum(nil)); got != a.diff.Hex {
		t.Fatalf("diff ID %s recorded, content hashes to %s", a.diff.Hex, got)
	}
	if got := fmt.Sprintf("%x", ch.Sum(nil)); got != a.digest.Hex {
		t.Fatalf("digest %s recorded, blob hashes to %s", a.digest.Hex, got)
	}
	ratio := float64(a.usize) / float64(a.size)
	if ratio < 1.8 || ratio > 2.2 || files < 2 {
		t.Fatalf("ratio %.2f over %d files, want ~2:1 over many files", ratio, files)
	}
}
