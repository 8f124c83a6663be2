package bundle

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestBlockedDirIsALeftOutEntry: a pod put a link to outside where a dir of the bundle must be. The
// entries below it are verified and left out, reported as conflicts; the rest restores, and nothing
// lands outside.
func TestBlockedDirIsALeftOutEntry(t *testing.T) {
	dest, outside := sandbox(t)
	if err := os.Symlink(outside, filepath.Join(dest, "esc")); err != nil {
		t.Fatal(err)
	}
	b := rawBundle(t, []raw{{name: "esc/evil.so", typ: tar.TypeReg, data: []byte{}}, {name: "ok/k.so", typ: tar.TypeReg, data: []byte{}},
		{name: "esc/l", typ: tar.TypeSymlink, link: "evil.so"}}, true)
	x, err := Extract(bytes.NewReader(b), root(t, dest), Options{Reserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	if f := listFiles(t, outside); len(f) != 0 {
		t.Fatalf("written outside the tree: %v", f)
	}
	if x.Written != 1 || !slices.Equal(x.Conflicts, []string{"esc/evil.so", "esc/l"}) {
		t.Fatalf("written %d, conflicts %q; want 1 and both esc entries", x.Written, x.Conflicts)
	}
}

// TestWriteSkipsSparseAndLargeFiles: a 2 GiB and an 8 GiB sparse file (a few KiB of data) and a file
// over the size limit are refused by name, without reading their logical bytes.
func TestWriteSkipsSparseAndLargeFiles(t *testing.T) {
	dir := t.TempDir()
	for name, size := range map[string]int64{"s2": 2 << 30, "s8": 8 << 30} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte("data"), size/2)
		f.Truncate(size)
		f.Close()
	}
	os.WriteFile(filepath.Join(dir, "big"), make([]byte, 3<<20), 0o644)
	for name, want := range map[string]string{"s2": SkipSparse, "s8": SkipSparse, "big": SkipTooLarge} {
		start := time.Now()
		lim := Limits{}
		if want == SkipTooLarge {
			lim.MaxFileBytes = 1 << 20
		}
		_, err := WriteLimited(&bytes.Buffer{}, root(t, dir), paths(t, []string{name}), Manifest{SKU: "s", Component: "triton"}, lim)
		var se *SkipError
		if !errors.As(err, &se) || se.Kind != want || se.Path.String() != name {
			t.Fatalf("%s: err = %v, want a %s skip", name, err, want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: refusing took %v: its logical bytes were read", name, d)
		}
	}
}
