package bundle

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReader feeds arbitrary bytes to Extract: it must never panic, never write outside the tree,
// never materialise more than its limit (sparse entries and zstd bombs are among the seeds), never
// leave temp files or anything else of a refused bundle, and whatever it accepts must match its
// manifest.
func FuzzReader(f *testing.F) {
	src := f.TempDir()
	names := writeTree(f, src, tritonTree())
	var good bytes.Buffer
	if _, err := Write(&good, root(f, src), paths(f, names), Manifest{SKU: "sku-a", Component: "triton"}); err != nil {
		f.Fatal(err)
	}
	f.Add(good.Bytes())
	f.Add(good.Bytes()[:good.Len()/3])
	f.Add(rawBundle(f, []raw{{name: "../x", typ: tar.TypeReg, data: []byte("x")}}, true))
	f.Add(rawBundle(f, []raw{{name: "l", typ: tar.TypeSymlink, link: "../../x"}}, true))
	f.Add(rawBundle(f, []raw{{name: "a", typ: tar.TypeReg, data: []byte("a")}, {name: "h", typ: tar.TypeLink, link: "a"}}, true))
	f.Add([]byte{})
	for _, kind := range sparseKinds {
		f.Add(sparseBundle(f, kind, 64<<20))
	}
	f.Add(rawBundle(f, []raw{{name: "bomb.so", typ: tar.TypeReg, size: 64 << 20}}, true))
	f.Add(rawBundle(f, []raw{{name: "d/l", typ: tar.TypeSymlink, link: ".."}, {name: "z", typ: tar.TypeSymlink, link: "d/l/.."}}, true))
	f.Add(rawBundle(f, []raw{{name: "a/b/l", typ: tar.TypeSymlink, link: "../../c"}, {name: "c", typ: tar.TypeReg, data: []byte("c")}}, true))
	f.Add(rawBundle(f, []raw{{name: strings.Repeat("n", 200) + "/" + strings.Repeat("m", 255), typ: tar.TypeReg, data: []byte("long")}}, true))
	f.Add(rawBundle(f, []raw{{name: strings.Repeat("x/", 2100) + "f", typ: tar.TypeReg, data: []byte("deep")}}, true))
	f.Fuzz(func(t *testing.T, data []byte) {
		dest, outside := sandbox(t)
		const maxBytes = 4 << 20
		res, err := Extract(bytes.NewReader(data), root(t, dest), Options{MaxBytes: maxBytes, MaxEntries: 1000})
		if o := listFiles(t, outside); len(o) != 0 {
			t.Fatalf("wrote outside the tree: %v", o)
		}
		got := listFiles(t, dest)
		var onDisk int64
		for _, p := range got {
			if strings.Contains(p, TempMarker) {
				t.Fatalf("temp file left: %s", p)
			}
			if fi, err := os.Lstat(filepath.Join(dest, p)); err == nil && fi.Mode().IsRegular() {
				onDisk += fi.Size()
			}
		}
		if onDisk > maxBytes {
			t.Fatalf("%d bytes materialised, limit %d", onDisk, maxBytes)
		}
		if err != nil && len(got) != 0 {
			t.Fatalf("a refused bundle left %v", got)
		}
		if err != nil {
			return
		}
		for _, e := range res.Manifest.Entries {
			if e.Type == TypeSymlink {
				// However the accepted links chain, what they lead to stays in the tree.
				if real, err := filepath.EvalSymlinks(filepath.Join(dest, filepath.FromSlash(e.Path))); err == nil &&
					real != dest && !strings.HasPrefix(real, dest+string(filepath.Separator)) {
					t.Fatalf("accepted link %s resolves outside the tree, to %s", e.Path, real)
				}
			}
			if e.Type != TypeFile {
				continue
			}
			b, rerr := os.ReadFile(filepath.Join(dest, filepath.FromSlash(e.Path)))
			if rerr != nil || int64(len(b)) != e.Size || sum(b) != e.SHA256 {
				t.Fatalf("accepted entry %s does not match its manifest (%v)", e.Path, rerr)
			}
		}
	})
}
