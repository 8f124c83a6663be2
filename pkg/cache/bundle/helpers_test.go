package bundle

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"warmd.io/warmd/pkg/fsroot"
)

// raw is one hand-made tar entry, for bundles our writer would never produce.
type raw struct {
	name, link string
	typ        byte
	data       []byte
	size       int64  // when data is nil and size > 0: that many zero bytes (for bombs)
	claim      []byte // when set, the manifest claims this content's digest instead of data's
}

// rawBundle builds a tar.zst from entries, appending a manifest that matches the regular files
// when manifest is true.
func rawBundle(t testing.TB, entries []raw, manifest bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(enc)
	m := Manifest{Schema: Schema, SKU: "sku-a", Component: "triton"}
	for _, e := range entries {
		size := int64(len(e.data))
		if e.data == nil {
			size = e.size
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if e.data != nil {
				tw.Write(e.data)
			} else {
				zero := make([]byte, 1<<20)
				for left := size; left > 0; left -= int64(len(zero)) {
					tw.Write(zero[:min(left, int64(len(zero)))])
				}
			}
			claimed := e.data
			if e.claim != nil {
				claimed = e.claim
			}
			s := sha256.Sum256(claimed)
			m.Entries = append(m.Entries, Entry{Path: e.name, Type: TypeFile, Size: size, SHA256: hex.EncodeToString(s[:])})
		}
		if e.typ == tar.TypeSymlink {
			m.Entries = append(m.Entries, Entry{Path: e.name, Type: TypeSymlink, Target: e.link})
		}
	}
	if manifest {
		mj, _ := json.Marshal(m)
		tw.WriteHeader(&tar.Header{Name: ManifestName, Typeflag: tar.TypeReg, Size: int64(len(mj)), Mode: 0o644})
		tw.Write(mj)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sandbox returns dest (where extraction goes) inside a parent that also holds an "outside" dir,
// the place an escaping entry would land.
func sandbox(t testing.TB) (dest, outside string) {
	t.Helper()
	top := t.TempDir()
	dest = filepath.Join(top, "tree", "sub")
	outside = filepath.Join(top, "outside")
	for _, d := range []string{dest, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dest, outside
}

// listFiles returns every non-dir path under dir, relative to it.
func listFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func writeTree(t testing.TB, root string, files map[string][]byte) []string {
	t.Helper()
	var names []string
	for name, data := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// root opens dir as an fsroot.Root for the test's life.
func root(t testing.TB, dir string) *fsroot.Root {
	t.Helper()
	r, err := fsroot.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// paths turns test file names into fsroot.Paths.
func paths(t testing.TB, names []string) []fsroot.Path {
	t.Helper()
	out := make([]fsroot.Path, len(names))
	for i, n := range names {
		out[i] = fsroot.MustPath(n)
	}
	return out
}
