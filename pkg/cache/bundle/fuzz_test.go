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
// never leave temp files, and whatever it accepts must match its manifest.
func FuzzReader(f *testing.F) {
	src := f.TempDir()
	names := writeTree(f, src, tritonTree())
	var good bytes.Buffer
	if _, err := Write(&good, src, names, Manifest{SKU: "sku-a", Component: "triton"}); err != nil {
		f.Fatal(err)
	}
	f.Add(good.Bytes())
	f.Add(good.Bytes()[:good.Len()/3])
	f.Add(rawBundle(f, []raw{{name: "../x", typ: tar.TypeReg, data: []byte("x")}}, true))
	f.Add(rawBundle(f, []raw{{name: "l", typ: tar.TypeSymlink, link: "../../x"}}, true))
	f.Add(rawBundle(f, []raw{{name: "a", typ: tar.TypeReg, data: []byte("a")}, {name: "h", typ: tar.TypeLink, link: "a"}}, true))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		dest, outside := sandbox(t)
		res, err := Extract(bytes.NewReader(data), dest, Options{MaxBytes: 4 << 20, MaxEntries: 1000})
		if o := listFiles(t, outside); len(o) != 0 {
			t.Fatalf("wrote outside the tree: %v", o)
		}
		got := listFiles(t, dest)
		for _, p := range got {
			if strings.Contains(p, TempMarker) {
				t.Fatalf("temp file left: %s", p)
			}
		}
		if err != nil {
			return
		}
		for _, e := range res.Manifest.Entries {
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
