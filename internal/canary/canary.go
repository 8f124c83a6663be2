// Package canary builds a directory outside warmd's data dir and proves, after a hostile case, that
// nothing in it changed: not a byte, a mode, a link target, an added or a removed entry. The security
// suite (test/security) plants one beside every data dir it hands warmd, points hostile input at it
// (keys with "..", symlinks planted in pod-mounted trees, bundles whose entries climb out), and calls
// Check after each case. A snapshot is taken with Lstat, so a link is compared as a link and never
// followed.
package canary

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Entry is what a snapshot records of one path under the canary root.
type Entry struct {
	Mode   fs.FileMode
	Size   int64
	SHA256 string // regular files
	Link   string // symlinks: the target text
}

// Snapshot maps each path under the root (slash-separated, relative, "." for the root) to its Entry.
type Snapshot map[string]Entry

// Dir is a canary directory with the snapshot it was built with.
type Dir struct {
	Path string
	want Snapshot
}

// New builds a canary tree under a fresh temp dir: files (one a secret-looking token), a nested dir,
// an empty dir, a read-only file and a relative and an absolute symlink, then snapshots it.
func New(t testing.TB) *Dir {
	t.Helper()
	root := filepath.Join(t.TempDir(), "canary")
	files := map[string]string{
		"secret.txt":             "CANARY-SECRET-TOKEN-do-not-leak\n",
		"etc/passwd":             "root:x:0:0:root:/root:/bin/bash\n",
		"nested/deep/file.bin":   strings.Repeat("\x00\x01canary", 512),
		"nested/readonly.txt":    "read only\n",
		"weights/model.bin":      "not yours\n",
		"compile-cache/sku/file": "canary cache entry\n",
	}
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.Chmod(filepath.Join(root, "nested/readonly.txt"), 0o444))
	must(t, os.MkdirAll(filepath.Join(root, "empty"), 0o700))
	must(t, os.Symlink("secret.txt", filepath.Join(root, "link-rel")))
	must(t, os.Symlink(filepath.Join(root, "etc"), filepath.Join(root, "link-abs")))
	d := &Dir{Path: root}
	d.want = Take(t, root)
	return d
}

// Check fails the test with every difference between the canary now and when it was built.
func (d *Dir) Check(t testing.TB) {
	t.Helper()
	if diff := Diff(d.want, Take(t, d.Path)); len(diff) > 0 {
		t.Errorf("the canary outside the data dir (%s) changed:\n  %s", d.Path, strings.Join(diff, "\n  "))
	}
}

// Take snapshots the tree under root without following links.
func Take(t testing.TB, root string) Snapshot {
	t.Helper()
	s := Snapshot{}
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := Entry{Mode: fi.Mode()}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Link, err = os.Readlink(p)
		case fi.Mode().IsRegular():
			e.Size = fi.Size()
			e.SHA256, err = fileSHA256(p)
		}
		s[filepath.ToSlash(rel)] = e
		return err
	})
	if err != nil {
		t.Fatalf("snapshot canary %s: %v", root, err)
	}
	return s
}

// Diff lists, sorted, every path added, removed or changed between two snapshots.
func Diff(want, got Snapshot) []string {
	var out []string
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: removed", p))
		case g != w:
			out = append(out, fmt.Sprintf("%s: was %+v, now %+v", p, w, g))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			out = append(out, fmt.Sprintf("%s: added", p))
		}
	}
	slices.Sort(out)
	return out
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
