package weights_test

import (
	"context"
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

// A ref write cut by a crash leaves a temp in the model's refs/ (the HF cache, beside what vLLM
// reads); the next publish of the model removes it.
func TestPublishSweepsRefTemps(t *testing.T) {
	t.Parallel()
	src, data := t.TempDir(), t.TempDir()
	newFakeModel(2, 64<<10).writeDir(t, src)
	refs := filepath.Join(data, "weights", "models--acme--swept", "refs")
	plantTemp(t, refs, "main")
	e := newEngine(t, data, nil)
	if _, err := e.Fetch(context.Background(), fileModel("acme/swept", src), nil); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir(refs)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Name() != "main" {
		t.Errorf("refs/ holds %v after the publish, want only main", es)
	}
}
