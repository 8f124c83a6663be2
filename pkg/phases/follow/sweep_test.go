package follow

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/state"
)

// A records write cut by a crash leaves a temp beside phases.json; the next follower removes it at
// its start and leaves the other writers' files in the shared state dir alone.
func TestNewSweepsOwnRecordTemps(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	stateDir := filepath.Join(root, "state")
	r, err := fsroot.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{recordsFileName, "other.json"} {
		tmp, err := r.CreateTemp(fsroot.Path{}, name)
		if err != nil {
			t.Fatal(err)
		}
		tmp.Close()
	}
	r.Close()
	if _, err := New(Options{Dir: filepath.Join(root, "pods"), StateDir: stateDir, Store: state.New(nil)}); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || !strings.HasPrefix(es[0].Name(), ".other.json.warmd-tmp-") {
		t.Errorf("state dir holds %v after New, want only the other writer's temp", es)
	}
}
