package containerd

import (
	"archive/tar"
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestTarCutterSplitsAtEntries cuts a tar with every kind of entry warmd meets in layers (PAX and
// GNU long names, links, empty and padded files, a PAX size record) at every boundary the cutter
// reports, feeding it in random pieces, and checks each piece is a tar of whole entries and that
// the pieces together list the original's entries in order with their content.
func TestTarCutterSplitsAtEntries(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	type ent struct {
		hdr  tar.Header
		data string
	}
	long := strings.Repeat("d/", 80) + "file"
	ents := []ent{
		{tar.Header{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755}, ""},
		{tar.Header{Name: "usr/a", Typeflag: tar.TypeReg, Mode: 0o644}, "hello"},
		{tar.Header{Name: "usr/empty", Typeflag: tar.TypeReg, Mode: 0o644}, ""},
		{tar.Header{Name: long, Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX}, strings.Repeat("x", 1500)},
		{tar.Header{Name: long + "2", Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatGNU}, strings.Repeat("y", 512)},
		{tar.Header{Name: "usr/l", Typeflag: tar.TypeSymlink, Linkname: "a"}, ""},
		{tar.Header{Name: "usr/h", Typeflag: tar.TypeLink, Linkname: "usr/a"}, ""},
		{tar.Header{Name: "usr/x", Typeflag: tar.TypeReg, Mode: 0o644, PAXRecords: map[string]string{"SCHILY.xattr.user.k": "v"}}, strings.Repeat("z", 70000)},
		{tar.Header{Name: "usr/.wh.gone", Typeflag: tar.TypeReg}, ""},
	}
	for _, e := range ents {
		h := e.hdr
		h.Size = int64(len(e.data))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		c := newTarCutter()
		var chunks [][]byte
		start, pos := 0, 0
		for pos < len(raw) {
			end := min(len(raw), pos+1+rng.IntN(900))
			for pos < end {
				n, at := c.next(raw[pos:end])
				pos += n
				if at {
					chunks = append(chunks, raw[start:pos])
					start = pos
				}
			}
		}
		chunks = append(chunks, raw[start:])
		if len(chunks) < len(ents) {
			t.Fatalf("round %d: %d chunks for %d entries", round, len(chunks), len(ents))
		}
		var got []string
		for i, ch := range chunks {
			tr := tar.NewReader(io.MultiReader(bytes.NewReader(ch), bytes.NewReader(make([]byte, 1024))))
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("round %d chunk %d: %v", round, i, err)
				}
				d, err := io.ReadAll(tr)
				if err != nil {
					t.Fatalf("round %d chunk %d %s: %v", round, i, h.Name, err)
				}
				got = append(got, h.Name+"="+string(d))
			}
		}
		if len(got) != len(ents) {
			t.Fatalf("round %d: %d entries back, want %d", round, len(got), len(ents))
		}
		for i, e := range ents {
			if got[i] != e.hdr.Name+"="+e.data {
				t.Fatalf("round %d entry %d: got %.40q, want %.40q", round, i, got[i], e.hdr.Name+"="+e.data)
			}
		}
	}
}

// TestTarCutterStopsOnGlobalHeader: a global PAX header applies to every later entry, so nothing
// after it may be cut off from it.
func TestTarCutterStopsOnGlobalHeader(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 1})
	_, _ = tw.Write([]byte("1"))
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "x"}})
	_ = tw.WriteHeader(&tar.Header{Name: "b", Typeflag: tar.TypeReg, Size: 1})
	_, _ = tw.Write([]byte("2"))
	_ = tw.Close()
	c := newTarCutter()
	raw := buf.Bytes()
	var cuts []int
	for pos := 0; pos < len(raw); {
		n, at := c.next(raw[pos:])
		pos += n
		if at {
			cuts = append(cuts, pos)
		}
	}
	if len(cuts) != 1 || cuts[0] != 1024 {
		t.Fatalf("cuts at %v, want only after the first entry (1024)", cuts)
	}
}
