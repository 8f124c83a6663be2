package embedded_test

import (
	"os"
	"path/filepath"
	"testing"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/prefetch/images/embedded"
)

// A ref write cut by a crash leaves a temp in refs/; opening the store removes it.
func TestNewSweepsRefTemps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, err := fsroot.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := r.CreateTemp(fsroot.MustPath("refs"), "0123.json")
	if err != nil {
		t.Fatal(err)
	}
	tmp.Close()
	r.Close()
	if _, err := embedded.New(embedded.Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir(filepath.Join(dir, "refs"))
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 0 {
		t.Errorf("refs/ holds %v after New, want nothing", es)
	}
}
