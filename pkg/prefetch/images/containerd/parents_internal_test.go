package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/pkg/archive"
	"golang.org/x/sys/unix"

	"warmd.io/warmd/internal/testenv"
)

// applyRecorded applies a tar of hdrs into a fresh dir with the recorder on, as applyOwn does.
func applyRecorded(t *testing.T, hdrs []tar.Header) *implicitDirs {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, h := range hdrs {
		if err := w.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	rec := newImplicitDirs(t.TempDir())
	if _, err := archive.Apply(context.Background(), rec.root, &b, archive.WithFilter(rec.filter)); err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestImplicitDirs(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "copying owners onto implicit parents needs root")
	}
	hdrs := []tar.Header{
		{Typeflag: tar.TypeReg, Name: "a/b/c", Mode: 0o644},
		{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "x/y"},
		{Typeflag: tar.TypeReg, Name: "l/f", Mode: 0o644},
		{Typeflag: tar.TypeDir, Name: "a/", Mode: 0o711},
		{Typeflag: tar.TypeReg, Name: "top", Mode: 0o644},
	}
	rec := applyRecorded(t, hdrs)
	var rel []string
	for _, d := range rec.dirs {
		rel = append(rel, d[len(rec.root):])
	}
	want := []string{"/a", "/a/b", "/x", "/x/y"} // x/y through the symlink, as the applier resolves it
	if len(rel) != len(want) {
		t.Fatalf("implicit dirs %q, want %q", rel, want)
	}
	for i := range want {
		if rel[i] != want[i] {
			t.Fatalf("implicit dirs %q, want %q", rel, want)
		}
	}
	if !rec.explicit[filepath.Join(rec.root, "a")] || len(rec.explicit) != 1 {
		t.Fatalf("explicit %v, want only a (its header came after it was made)", rec.explicit)
	}

	// A lower layer: a (0700, 1234, an xattr), a/b a file (replaced: defaults stay), x/y (0750, 77).
	lower := t.TempDir()
	for _, d := range []string{"a", "x/y"} {
		if err := os.MkdirAll(filepath.Join(lower, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(lower, "a/b"), nil, 0o644)
	os.Chmod(filepath.Join(lower, "a"), 0o700)
	os.Chown(filepath.Join(lower, "a"), 1234, 1234)
	if err := unix.Lsetxattr(filepath.Join(lower, "a"), "user.k", []byte("v"), 0); err != nil {
		testenv.Unavailable(t, "user xattrs on the test's temp dir: "+err.Error())
	}
	os.Chmod(filepath.Join(lower, "x/y"), 0o750)
	os.Chown(filepath.Join(lower, "x/y"), 77, 78)
	if err := rec.fixup([]string{t.TempDir(), lower}); err != nil { // an empty top layer, then lower
		t.Fatal(err)
	}
	check := func(rel string, mode os.FileMode, uid, gid int) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(rec.root, rel), &st); err != nil {
			t.Fatal(err)
		}
		if got := os.FileMode(st.Mode & 0o777); got != mode || int(st.Uid) != uid || int(st.Gid) != gid {
			t.Errorf("%s: mode %v uid %d gid %d, want %v %d %d", rel, got, st.Uid, st.Gid, mode, uid, gid)
		}
	}
	check("a", 0o711, 0, 0) // its own header decides owner and mode ...
	if v, err := getXattr(filepath.Join(rec.root, "a"), "user.k"); err != nil || string(v) != "v" {
		t.Errorf("a: xattr user.k %q, %v; want the lower layer's", v, err) // ... the lower layer's xattrs stay
	}
	check("a/b", 0o755, 0, 0) // a file below: the applier's defaults
	check("x", 0o755, 0, 0)   // in no lower layer
	check("x/y", 0o750, 77, 78)

	t.Run("setgid lower", func(t *testing.T) {
		rec := applyRecorded(t, []tar.Header{{Typeflag: tar.TypeReg, Name: "s/f", Mode: 0o644}})
		lower := t.TempDir()
		os.Mkdir(filepath.Join(lower, "s"), 0o755)
		os.Chmod(filepath.Join(lower, "s"), 0o775|os.ModeSetgid)
		if err := rec.fixup([]string{lower}); !errors.Is(err, errRedoSerial) {
			t.Fatalf("fixup: %v, want the serial apply", err)
		}
	})
	t.Run("too many", func(t *testing.T) {
		defer func(n int) { maxImplicitDirs = n }(maxImplicitDirs)
		maxImplicitDirs = 2
		rec := applyRecorded(t, hdrs)
		if err := rec.fixup(nil); !errors.Is(err, errRedoSerial) {
			t.Fatalf("fixup with %d dirs recorded over a limit of 2: %v, want the serial apply", len(rec.dirs), err)
		}
	})
}
