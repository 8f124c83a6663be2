package hfcache

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"warmd.io/warmd/pkg/fsroot"
)

func TestIsSnapshotDir(t *testing.T) {
	tests := []struct {
		path, dir, rel string
		ok             bool
	}{
		{"/hf/models--org--m/snapshots/abc", "/hf/models--org--m", "snapshots/abc", true},
		{"/hf/models--org--m/snapshots", "", "", false},
		{"/hf/datasets--org--m/snapshots/abc", "", "", false},
		{"/hf/models--org--m/blobs/abc", "", "", false},
		{"models--org--m/snapshots/abc", "models--org--m", "snapshots/abc", true},
		{"abc", "", "", false},
	}
	for _, tt := range tests {
		dir, rel, ok := IsSnapshotDir(tt.path)
		if ok != tt.ok || dir != tt.dir || rel != tt.rel {
			t.Errorf("IsSnapshotDir(%q) = %q, %q, %v; want %q, %q, %v", tt.path, dir, rel, ok, tt.dir, tt.rel, tt.ok)
		}
	}
}

// TestListAndBlob builds one published snapshot the way the weights part does (relative links into
// blobs/) with hostile entries beside it, and checks both readers agree: a good link resolves to its
// blob, one leading out of the model's blobs/ is refused by name, a missing snapshot is
// ErrNotPublished.
func TestListAndBlob(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "models--org--m")
	for _, d := range []string{"blobs", "snapshots/rev", "other"} {
		if err := os.MkdirAll(filepath.Join(m, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(m, "blobs", "aa"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m, "other", "bb"), []byte("elsewhere"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"model.safetensors": "../../blobs/aa", "alias.safetensors": "../../blobs/aa"} {
		if err := os.Symlink(target, filepath.Join(m, "snapshots/rev", name)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := fsroot.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	snap, err := SnapshotDir("org/m", "rev")
	if err != nil {
		t.Fatal(err)
	}
	files, err := List(root, snap)
	if err != nil || len(files) != 1 || files[0].Size != 7 || files[0].Path != Blobs(snap.Dir().Dir()).Join(fsroot.MustPath("aa")) {
		t.Fatalf("List = %+v, %v; want the one blob once", files, err)
	}
	if f, err := Blob(root, snap, fsroot.MustPath("model.safetensors")); err != nil || f.Size != 7 {
		t.Fatalf("Blob = %+v, %v", f, err)
	}
	if err := os.Symlink("../../other/bb", filepath.Join(m, "snapshots/rev", "evil.safetensors")); err != nil {
		t.Fatal(err)
	}
	if _, err := Blob(root, snap, fsroot.MustPath("evil.safetensors")); err == nil {
		t.Error("Blob followed a link out of blobs/")
	}
	if _, err := List(root, snap); err == nil {
		t.Error("List took a snapshot with a link out of blobs/")
	}
	gone, _ := SnapshotDir("org/m", "other-rev")
	if _, err := List(root, gone); !errors.Is(err, ErrNotPublished) {
		t.Errorf("List of a missing snapshot: %v, want ErrNotPublished", err)
	}
}
