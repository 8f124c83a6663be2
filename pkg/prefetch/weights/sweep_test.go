package weights_test

import (
	"os"
	"path/filepath"
	"testing"

	"warmd.io/warmd/pkg/fsroot"
)

// plantTemp leaves what a writer killed between CreateTemp and Commit leaves: a temp beside name.
func plantTemp(t *testing.T, dir, name string) {
	t.Helper()
	r, err := fsroot.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tmp, err := r.CreateTemp(fsroot.Path{}, name)
	if err != nil {
		t.Fatal(err)
	}
	tmp.Close()
}

// A record write cut by a crash leaves a temp in state/weights; the next engine removes it before
// writing anything, and keeps the records.
func TestNewEngineSweepsRecordTemps(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	recs := filepath.Join(data, "state/weights")
	plantTemp(t, recs, "models--org--m.json")
	if err := os.WriteFile(filepath.Join(recs, "models--org--m.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	newEngine(t, data, nil)
	es, err := os.ReadDir(recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Name() != "models--org--m.json" {
		t.Errorf("state/weights holds %v after New, want only the record", es)
	}
}
