package weights

import (
	"os"
	"path/filepath"
	"testing"

	"warmd.io/warmd/pkg/fsroot"
)

// stagingRoot opens a temp dir as a Root and returns it with the journal's dir below it.
func stagingRoot(t *testing.T) (*fsroot.Root, fsroot.Path, string) {
	t.Helper()
	r, err := fsroot.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	p := fsroot.MustPath("stage")
	return r, p, r.Name(p)
}

func TestJournal(t *testing.T) {
	t.Parallel()
	h := journalHeader{Source: "s3://b/m/", Revision: "main", ChunkSize: 4, Files: []journalFile{{Name: "a", Size: 10}, {Name: "b", Size: 3}}}
	for _, tc := range []struct {
		name      string
		tail      string // appended raw to the journal after the header
		header    func(*journalHeader)
		wantFresh bool
		wantDone  [][2]int
		wantNot   [][2]int
		verified  []int
	}{
		{"replays chunks and verifications", "c 0 0\nc 0 2\nc 1 0\nv 1 size -\n", nil, false, [][2]int{{0, 0}, {0, 2}, {1, 0}}, [][2]int{{0, 1}}, []int{1}},
		{"a reset forgets a file", "c 0 0\nc 0 1\nv 0 size -\nr 0\nc 0 1\n", nil, false, [][2]int{{0, 1}}, [][2]int{{0, 0}}, nil},
		{"a torn last line claims nothing", "c 0 0\nc 0 1", nil, false, [][2]int{{0, 0}}, [][2]int{{0, 1}}, nil},
		{"garbage lines are ignored", "c 0 0\nzz top\nc x y\n", nil, false, [][2]int{{0, 0}}, nil, nil},
		{"a changed listing starts over", "c 0 0\n", func(h *journalHeader) { h.Files[0].ETag = "new" }, true, nil, [][2]int{{0, 0}}, nil},
		{"a changed chunk size starts over", "c 0 0\n", func(h *journalHeader) { h.ChunkSize = 8 }, true, nil, [][2]int{{0, 0}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, sp, dir := stagingRoot(t)
			j, fresh, err := openJournal(root, sp, h)
			if err != nil || !fresh {
				t.Fatalf("first open: fresh=%v err=%v", fresh, err)
			}
			j.close()
			f, _ := os.OpenFile(filepath.Join(dir, "journal"), os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString(tc.tail)
			f.Close()
			os.WriteFile(filepath.Join(dir, "leftover"), []byte("x"), 0o644)
			h2 := h
			h2.Files = append([]journalFile(nil), h.Files...)
			if tc.header != nil {
				tc.header(&h2)
			}
			j, fresh, err = openJournal(root, sp, h2)
			if err != nil {
				t.Fatal(err)
			}
			defer j.close()
			if fresh != tc.wantFresh {
				t.Errorf("fresh = %v, want %v", fresh, tc.wantFresh)
			}
			for _, k := range tc.wantDone {
				if !j.isDone(k[0], k[1]) {
					t.Errorf("chunk %v not done after replay", k)
				}
			}
			for _, k := range tc.wantNot {
				if j.isDone(k[0], k[1]) {
					t.Errorf("chunk %v done after replay; it must be fetched again", k)
				}
			}
			for _, fi := range tc.verified {
				if _, ok := j.verifiedAs(fi); !ok {
					t.Errorf("file %d not verified after replay", fi)
				}
			}
			_, err = os.Stat(filepath.Join(dir, "leftover"))
			if tc.wantFresh != os.IsNotExist(err) {
				t.Errorf("leftover staging exists=%v; a fresh journal must clear the dir, a resumed one keep it", err == nil)
			}
			// New records after a torn line must parse.
			if err := j.chunkDone(1, 0, ""); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("lock excludes a second writer", func(t *testing.T) {
		root, sp, _ := stagingRoot(t)
		j, _, err := openJournal(root, sp, h)
		if err != nil {
			t.Fatal(err)
		}
		defer j.close()
		if _, _, err := openJournal(root, sp, h); err == nil {
			t.Fatal("a second process could open the same staging")
		}
	})
}
