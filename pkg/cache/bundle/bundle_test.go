package bundle

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func tritonTree() map[string][]byte {
	files := map[string][]byte{}
	for i := range 5 {
		dir := fmt.Sprintf("Q7C4AXJ2V%02dZ3", i)
		files[dir+"/triton_poi_fused.json"] = []byte(fmt.Sprintf(`{"name":"k%d"}`, i))
		files[dir+"/triton_poi_fused.cubin"] = bytes.Repeat([]byte{byte(i)}, 4096+i)
		files[dir+"/__triton_launcher.so"] = bytes.Repeat([]byte{byte(i + 1)}, 10000)
	}
	return files
}

func TestRoundTrip(t *testing.T) {
	src := t.TempDir()
	files := tritonTree()
	names := writeTree(t, src, files)
	var buf bytes.Buffer
	res, err := Write(&buf, root(t, src), paths(t, names), Manifest{SKU: "sku-a", Component: "triton", Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Size != int64(buf.Len()) || res.SHA256 != sum(buf.Bytes()) {
		t.Fatalf("result size/sha %d %s do not describe the %d written bytes", res.Size, res.SHA256, buf.Len())
	}
	// Deterministic: the same files give the same bytes (apart from the creation time in the manifest).
	var again bytes.Buffer
	hdr := Manifest{SKU: "sku-a", Component: "triton", Created: res.Manifest.Created}
	hdr.Node = "n1"
	r2, err := Write(&again, root(t, src), paths(t, names), hdr)
	if err != nil || r2.SHA256 != res.SHA256 {
		t.Fatalf("second write of the same files: sha %s vs %s (%v)", r2.SHA256, res.SHA256, err)
	}

	dest := t.TempDir()
	got, err := Extract(bytes.NewReader(buf.Bytes()), root(t, dest), Options{SHA256: res.SHA256, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Written != len(files) || got.Existing != 0 || len(got.Conflicts) != 0 {
		t.Fatalf("first extract: written %d existing %d conflicts %v, want %d new", got.Written, got.Existing, got.Conflicts, len(files))
	}
	for name, data := range files {
		b, err := os.ReadFile(filepath.Join(dest, name))
		if err != nil || !bytes.Equal(b, data) {
			t.Fatalf("%s: restored content differs (%v)", name, err)
		}
	}
	if got.Manifest.SKU != "sku-a" || got.Manifest.Bytes != res.Manifest.Bytes {
		t.Fatalf("manifest read back %+v", got.Manifest)
	}

	t.Run("same content again counts as existing", func(t *testing.T) {
		got, err := Extract(bytes.NewReader(buf.Bytes()), root(t, dest), Options{SHA256: res.SHA256})
		if err != nil || got.Existing != len(files) || got.Written != 0 {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
	t.Run("a different existing file is kept and reported", func(t *testing.T) {
		victim := filepath.Join(dest, names[0])
		os.WriteFile(victim, []byte("someone else's kernel"), 0o644)
		got, err := Extract(bytes.NewReader(buf.Bytes()), root(t, dest), Options{SHA256: res.SHA256})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Conflicts, []string{names[0]}) {
			t.Fatalf("conflicts %v, want [%s]", got.Conflicts, names[0])
		}
		if b, _ := os.ReadFile(victim); string(b) != "someone else's kernel" {
			t.Fatal("the existing different file was overwritten")
		}
		for _, f := range listFiles(t, dest) {
			if IsTemp(f) {
				t.Fatalf("temp file %s left behind", f)
			}
		}
	})
	t.Run("check refuses another SKU", func(t *testing.T) {
		d := t.TempDir()
		_, err := Extract(bytes.NewReader(buf.Bytes()), root(t, d), Options{SHA256: res.SHA256, Check: func(m *Manifest) error {
			if m.SKU != "sku-b" {
				return fmt.Errorf("bundle is for SKU %s, this node is sku-b", m.SKU)
			}
			return nil
		}})
		if !errors.Is(err, ErrRejected) {
			t.Fatalf("err = %v, want ErrRejected", err)
		}
		if f := listFiles(t, d); len(f) != 0 {
			t.Fatalf("a refused bundle left %v", f)
		}
	})
}

func TestRejectsMaliciousBundles(t *testing.T) {
	good := []raw{{name: "ok/a.json", typ: tar.TypeReg, data: []byte("{}")}}
	cases := []struct {
		name    string
		bundle  func(t *testing.T) []byte
		opts    Options
		want    error
		prepare func(t *testing.T, dest, outside string)
	}{
		{name: "tar-slip ../", want: ErrUnsafe, bundle: func(t *testing.T) []byte {
			return rawBundle(t, append(good, raw{name: "../../outside/evil.so", typ: tar.TypeReg, data: []byte("x")}), true)
		}},
		{name: "slip inside a path", want: ErrUnsafe, bundle: func(t *testing.T) []byte {
			return rawBundle(t, []raw{{name: "a/../../../outside/evil", typ: tar.TypeReg, data: []byte("x")}}, true)
		}},
		{name: "absolute path", want: ErrUnsafe, bundle: func(t *testing.T) []byte {
			return rawBundle(t, []raw{{name: "/tmp/warmd-cache-evil", typ: tar.TypeReg, data: []byte("x")}}, true)
		}},
		{name: "symlink escape", want: ErrUnsafe, bundle: func(t *testing.T) []byte {
			return rawBundle(t, []raw{{name: "esc", typ: tar.TypeSymlink, link: "../../outside"}, {name: "esc/evil", typ: tar.TypeReg, data: []byte("x")}}, true)
		}},
		{name: "absolute symlink", want: ErrUnsafe, bundle: func(t *testing.T) []byte {
			return rawBundle(t, []raw{{name: "esc", typ: tar.TypeSymlink, link: "/etc"}}, true)
		}},
		{name: "hardlink escape", want: ErrUnsafe, bundle: func(t *testing.T) []byte {
			return rawBundle(t, []raw{{name: "h", typ: tar.TypeLink, link: "../../outside/secret"}}, true)
		}},
		{name: "hardlink to absolute path", want: ErrUnsafe, bundle: func(t *testing.T) []byte {
			return rawBundle(t, []raw{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}}, true)
		}},
		{name: "char device", want: ErrUnsafe, bundle: func(t *testing.T) []byte {
			return rawBundle(t, []raw{{name: "null", typ: tar.TypeChar}}, true)
		}},
		{name: "fifo", want: ErrUnsafe, bundle: func(t *testing.T) []byte {
			return rawBundle(t, []raw{{name: "p", typ: tar.TypeFifo}}, true)
		}},
		{name: "zstd bomb", want: ErrTooLarge, opts: Options{MaxBytes: 8 << 20}, bundle: func(t *testing.T) []byte {
			b := rawBundle(t, []raw{{name: "bomb.so", typ: tar.TypeReg, size: 256 << 20}}, true)
			if len(b) > 1<<20 {
				t.Fatalf("bomb is %d bytes compressed; expected a tiny one", len(b))
			}
			return b
		}},
		{name: "truncated", want: ErrCorrupt, bundle: func(t *testing.T) []byte {
			b := rawBundle(t, append(good, raw{name: "big.so", typ: tar.TypeReg, data: bytes.Repeat([]byte("kernel"), 50000)}), true)
			return b[:len(b)/2]
		}},
		{name: "truncated before the manifest", want: ErrCorrupt, bundle: func(t *testing.T) []byte {
			return rawBundle(t, good, false)
		}},
		{name: "wrong sha256", want: ErrCorrupt, opts: Options{SHA256: sum([]byte("another bundle"))}, bundle: func(t *testing.T) []byte {
			return rawBundle(t, good, true)
		}},
		{name: "content differs from manifest", want: ErrCorrupt, bundle: func(t *testing.T) []byte {
			return rawBundle(t, []raw{{name: "a.so", typ: tar.TypeReg, data: []byte("tampered"), claim: []byte("original")}}, true)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dest, outside := sandbox(t)
			if tc.prepare != nil {
				tc.prepare(t, dest, outside)
			}
			before := listFiles(t, dest)
			_, err := Extract(bytes.NewReader(tc.bundle(t)), root(t, dest), tc.opts)
			if err == nil {
				t.Fatal("malicious bundle accepted")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if f := listFiles(t, outside); len(f) != 0 {
				t.Fatalf("written outside the tree: %v", f)
			}
			if after := listFiles(t, dest); !slices.Equal(after, before) {
				t.Fatalf("rejected bundle changed the tree: %v -> %v", before, after)
			}
			if _, err := os.Stat("/tmp/warmd-cache-evil"); err == nil {
				t.Fatal("absolute path was written")
			}
		})
	}
}

// TestEntryDigestsAlwaysVerified: a manifest whose digest lies about a file's content is refused
// whether or not the bundle's own name (sha256 of its bytes) is known: the name proves the bytes are
// what the uploader sent, not that the uploader's manifest is true.
func TestEntryDigestsAlwaysVerified(t *testing.T) {
	b := rawBundle(t, []raw{{name: "a.so", typ: tar.TypeReg, data: []byte("tampered"), claim: []byte("original")}}, true)
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"named by its digest", Options{SHA256: sum(b)}},
		{"no name", Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			_, err := Extract(bytes.NewReader(b), root(t, dest), tc.opts)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if f := listFiles(t, dest); len(f) != 0 {
				t.Fatalf("a refused bundle left %v", f)
			}
		})
	}
}
