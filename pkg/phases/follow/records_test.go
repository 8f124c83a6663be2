package follow

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warmd.io/warmd/internal/canary"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/phases"
)

// The records file is read and replaced through fsroot: a link planted in its place is neither
// read (its target's content never reaches the error) nor written through.
func TestRecordsFileNeverFollowsALink(t *testing.T) {
	c := canary.New(t)
	state := filepath.Join(filepath.Dir(c.Path), "state")
	os.MkdirAll(state, 0o755)
	path := filepath.Join(state, recordsFileName)
	if err := os.Symlink(filepath.Join(c.Path, "secret.txt"), path); err != nil {
		t.Fatal(err)
	}
	_, err := loadRecords(path)
	if !errors.Is(err, fsroot.ErrSymlink) || strings.Contains(err.Error(), "CANARY") {
		t.Errorf("load through a link: %v", err)
	}
	if err := saveRecords(path, []phases.Record{{Namespace: "ns", Pod: "p"}}); err != nil {
		t.Fatal(err)
	}
	recs, err := loadRecords(path)
	if err != nil || len(recs) != 1 || recs[0].Pod != "p" {
		t.Errorf("records after the save replaced the link: %+v %v", recs, err)
	}
	c.Check(t)
	if ents, _ := os.ReadDir(state); len(ents) != 1 {
		t.Errorf("state dir holds %v; the temp file was not committed", ents)
	}
}
