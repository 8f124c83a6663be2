package bundle

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// Sparse kinds archive/tar reads and expands: the old GNU type 'S' and GNU's PAX formats.
const (
	sparseGNU    = "gnu"
	sparsePAX0_0 = "pax-0.0"
	sparsePAX0_1 = "pax-0.1"
	sparsePAX1_0 = "pax-1.0"
)

var sparseKinds = []string{sparseGNU, sparsePAX0_0, sparsePAX0_1, sparsePAX1_0}

// block is one 512-byte tar header block, filled field by field (archive/tar cannot write sparse
// entries, so these are made by hand).
type block [512]byte

func (b *block) str(off, n int, s string) { copy(b[off:off+n], s) }
func (b *block) oct(off, n int, v int64)  { copy(b[off:off+n], fmt.Sprintf("%0*o\x00", n-1, v)) }

func (b *block) finish() []byte {
	copy(b[148:156], "        ")
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b[:]
}

func ustarHeader(name string, typ byte, size int64) *block {
	var b block
	b.str(0, 100, name)
	b.oct(100, 8, 0o644)
	b.oct(108, 8, 0)
	b.oct(116, 8, 0)
	b.oct(124, 12, size)
	b.oct(136, 12, 0)
	b[156] = typ
	b.str(257, 6, "ustar\x00")
	b.str(263, 2, "00")
	return &b
}

func pad(data []byte) []byte {
	if r := len(data) % 512; r != 0 {
		data = append(data, make([]byte, 512-r)...)
	}
	return data
}

// paxEntry is a PAX extended header ('x') carrying records, then its data.
func paxEntry(records [][2]string) []byte {
	var data []byte
	for _, kv := range records {
		rec := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(rec) + len(fmt.Sprint(len(rec)))
		if len(fmt.Sprint(n)) > len(fmt.Sprint(len(rec))) {
			n++
		}
		data = append(data, fmt.Sprintf("%d%s", n, rec)...)
	}
	return append(ustarHeader("PaxHeaders/x", tar.TypeXHeader, int64(len(data))).finish(), pad(data)...)
}

// sparseEntry is one sparse file of logical size with one byte of data ('x') at its end: a few
// hundred bytes of tar that archive/tar expands to size bytes.
func sparseEntry(kind, name string, size int64) []byte {
	off := size - 1
	switch kind {
	case sparseGNU:
		h := ustarHeader(name, tar.TypeGNUSparse, 1)
		h.str(257, 8, "ustar  \x00")
		h.oct(386, 12, off) // sparse[0].offset
		h.oct(398, 12, 1)   // sparse[0].numbytes
		h.oct(483, 12, size)
		return append(h.finish(), pad([]byte("x"))...)
	case sparsePAX0_0:
		out := paxEntry([][2]string{{"GNU.sparse.size", fmt.Sprint(size)}, {"GNU.sparse.numblocks", "1"},
			{"GNU.sparse.offset", fmt.Sprint(off)}, {"GNU.sparse.numbytes", "1"}})
		return append(append(out, ustarHeader(name, tar.TypeReg, 1).finish()...), pad([]byte("x"))...)
	case sparsePAX0_1:
		out := paxEntry([][2]string{{"GNU.sparse.size", fmt.Sprint(size)}, {"GNU.sparse.numblocks", "1"},
			{"GNU.sparse.map", fmt.Sprintf("%d,1", off)}})
		return append(append(out, ustarHeader(name, tar.TypeReg, 1).finish()...), pad([]byte("x"))...)
	case sparsePAX1_0:
		out := paxEntry([][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"},
			{"GNU.sparse.name", name}, {"GNU.sparse.realsize", fmt.Sprint(size)}})
		data := append(pad([]byte(fmt.Sprintf("1\n%d\n1\n", off))), pad([]byte("x"))...)
		return append(append(out, ustarHeader("GNUSparseFile.0/"+name, tar.TypeReg, int64(len(data))-511).finish()...), data...)
	}
	panic("unknown sparse kind " + kind)
}

// sparseBundle is a bundle holding one sparse entry of logical size and a manifest that declares the
// file as size zero bytes with their digest, as a hostile writer would.
func sparseBundle(t testing.TB, kind string, size int64) []byte {
	t.Helper()
	var tarBuf bytes.Buffer
	tarBuf.Write(sparseEntry(kind, "bomb.so", size))
	tw := tar.NewWriter(&tarBuf)
	zeros := make([]byte, size)
	zeros[size-1] = 'x'
	m := Manifest{Schema: Schema, SKU: "sku-a", Component: "triton", Bytes: size,
		Entries: []Entry{{Path: "bomb.so", Type: TypeFile, Size: size, SHA256: sum(zeros), Mode: 0o644}}}
	mj, _ := json.Marshal(m)
	tw.WriteHeader(&tar.Header{Name: ManifestName, Typeflag: tar.TypeReg, Size: int64(len(mj)), Mode: 0o644})
	tw.Write(mj)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	enc, _ := zstd.NewWriter(&out)
	enc.Write(tarBuf.Bytes())
	enc.Close()
	return out.Bytes()
}

// TestSparseFixturesExpand proves the hand-made sparse entries are what archive/tar expands (so the
// rejection test below tests the real thing): reading one yields its logical size from a tiny stream.
func TestSparseFixturesExpand(t *testing.T) {
	for _, kind := range sparseKinds {
		t.Run(kind, func(t *testing.T) {
			raw := sparseEntry(kind, "bomb.so", 1<<20)
			tr := tar.NewReader(bytes.NewReader(append(raw, make([]byte, 1024)...)))
			hdr, err := tr.Next()
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if _, err := got.ReadFrom(tr); err != nil {
				t.Fatal(err)
			}
			if hdr.Name != "bomb.so" || got.Len() != 1<<20 || got.Bytes()[got.Len()-1] != 'x' {
				t.Fatalf("%s: name %q, %d bytes from a %d-byte entry", kind, hdr.Name, got.Len(), len(raw))
			}
		})
	}
}

// TestRejectsSparseEntries: a sparse entry in any format is refused before a byte of it is written,
// by Extract and Scan alike, even when its manifest "agrees".
func TestRejectsSparseEntries(t *testing.T) {
	for _, kind := range sparseKinds {
		t.Run(kind, func(t *testing.T) {
			b := sparseBundle(t, kind, 64<<20)
			if len(b) > 4096 {
				t.Fatalf("sparse bundle is %d bytes; expected a tiny one", len(b))
			}
			dest, outside := sandbox(t)
			_, err := Extract(bytes.NewReader(b), root(t, dest), Options{MaxBytes: 8 << 20})
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "sparse") {
				t.Fatalf("err = %v, want ErrUnsafe naming the sparse entry", err)
			}
			if f := append(listFiles(t, dest), listFiles(t, outside)...); len(f) != 0 {
				t.Fatalf("a sparse bundle left %v", f)
			}
			if _, err := Scan(bytes.NewReader(b), Options{}); !errors.Is(err, ErrUnsafe) {
				t.Fatalf("Scan: err = %v, want ErrUnsafe", err)
			}
		})
	}
}

// TestMaterialisedBytesAreCounted: the limits apply to what lands on disk, checked from each entry's
// header before its file is created, not to the compressed size or the tar stream.
func TestMaterialisedBytesAreCounted(t *testing.T) {
	bomb := rawBundle(t, []raw{{name: "a.so", typ: tar.TypeReg, data: []byte("small")}, {name: "bomb.so", typ: tar.TypeReg, size: 64 << 20}}, true)
	if len(bomb) > 64<<10 {
		t.Fatalf("bomb is %d bytes compressed", len(bomb))
	}
	for _, tc := range []struct {
		name string
		opts Options
		want error
	}{
		{"bundle limit", Options{MaxBytes: 16 << 20}, ErrTooLarge},
		{"entry limit", Options{MaxEntryBytes: 1 << 20}, ErrTooLarge},
		{"size declared by the published manifest", Options{Expect: &Manifest{Schema: Schema, SKU: "sku-a", Component: "triton", Bytes: 5 + 1<<20,
			Entries: []Entry{{Path: "a.so", Type: TypeFile, Size: 5, SHA256: sum([]byte("small"))}, {Path: "bomb.so", Type: TypeFile, Size: 1 << 20, SHA256: sum(make([]byte, 1<<20))}}}}, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			calls := 0
			tc.opts.Statfs = func() (int64, int64, error) {
				// Called once before the stream and once per admitted file: only a.so may pass.
				if calls++; calls > 2 {
					t.Error("bomb.so was admitted")
				}
				return 1 << 40, 1 << 40, nil
			}
			_, err := Extract(bytes.NewReader(bomb), root(t, dest), tc.opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if f := listFiles(t, dest); len(f) != 0 {
				t.Fatalf("a refused bundle left %v", f)
			}
		})
	}
	t.Run("trailing zeros beyond the entries", func(t *testing.T) {
		var buf bytes.Buffer
		enc, _ := zstd.NewWriter(&buf)
		tw := tar.NewWriter(enc)
		m := Manifest{Schema: Schema, SKU: "sku-a", Component: "triton"}
		mj, _ := json.Marshal(m)
		tw.WriteHeader(&tar.Header{Name: ManifestName, Typeflag: tar.TypeReg, Size: int64(len(mj)), Mode: 0o644})
		tw.Write(mj)
		tw.Close()
		enc.Write(make([]byte, 256<<20))
		enc.Close()
		_, err := Extract(bytes.NewReader(buf.Bytes()), root(t, t.TempDir()), Options{})
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("err = %v, want ErrTooLarge for 256 MiB of padding after the tar end", err)
		}
	})
}

// TestFreeSpace: extraction refuses to start a file that would eat into the reserve, stops inside a
// big file when pods filled the disk meanwhile, and leaves nothing behind either way.
func TestFreeSpace(t *testing.T) {
	b := rawBundle(t, []raw{{name: "a.so", typ: tar.TypeReg, data: []byte("small")}, {name: "big.so", typ: tar.TypeReg, size: 96 << 20}}, true)
	const total, reserve = 100 << 30, 1 << 30
	for _, tc := range []struct {
		name string
		free func(call int) int64
	}{
		{"before the big file", func(call int) int64 { return reserve + 50<<20 }},
		{"during the big file", func(call int) int64 {
			if call <= 3 {
				return 10 << 30
			}
			return reserve - 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			calls := 0
			_, err := Extract(bytes.NewReader(b), root(t, dest), Options{Reserve: reserve, Statfs: func() (int64, int64, error) {
				calls++
				return tc.free(calls), total, nil
			}})
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("err = %v, want ErrNoSpace", err)
			}
			if f := listFiles(t, dest); len(f) != 0 {
				t.Fatalf("a refused bundle left %v", f)
			}
		})
	}
	t.Run("real file system", func(t *testing.T) {
		dest := t.TempDir()
		_, err := Extract(bytes.NewReader(b), root(t, dest), Options{Reserve: 1 << 62})
		if !errors.Is(err, ErrNoSpace) {
			t.Fatalf("err = %v, want ErrNoSpace with a reserve larger than any disk", err)
		}
		if _, err := os.Stat(filepath.Join(dest, "a.so")); err == nil {
			t.Fatal("a.so was left")
		}
	})
}
