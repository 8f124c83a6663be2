package weights_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"warmd.io/warmd/internal/pagecachetest"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/prefetch/weights"
)

// weights.pageCache: bypass (the engine's default, O_DIRECT) publishes a model the page cache holds
// none of; keep (BufferedIO) publishes one that stays cached, so a loader started right after reads
// memory. mincore(2) on the published shard says which pages are resident.
func TestPageCacheModes(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	model := newFakeModel(5, 8<<20, 4<<20+4096)
	model.writeDir(t, src)
	shard := "model-00001-of-00002.safetensors"
	if _, ok := model[shard]; !ok {
		t.Fatalf("fake model has no %s", shard)
	}
	requireDirectIO(t, t.TempDir())
	for _, tc := range []struct {
		name           string
		buffered       bool
		minRes, maxRes float64
	}{
		{"bypass", false, 0, 0.05},
		{"keep", true, 0.95, 1},
	} {
		data := t.TempDir()
		e := newEngine(t, data, func(o *weights.Options) { o.BufferedIO = tc.buffered })
		st, err := e.Fetch(context.Background(), fileModel("acme/cached", src), nil)
		if err != nil {
			t.Fatal(err)
		}
		blob, err := filepath.EvalSymlinks(filepath.Join(st.SnapshotPath, shard))
		if err != nil {
			t.Fatal(err)
		}
		r := pagecachetest.Resident(t, blob)
		t.Logf("%s: %.0f%% resident", tc.name, 100*r)
		if r < tc.minRes || r > tc.maxRes {
			t.Errorf("%s: %.0f%% of the published shard is in the page cache, want %.0f%%..%.0f%%", tc.name, 100*r, 100*tc.minRes, 100*tc.maxRes)
		}
		checkSnapshot(t, st.SnapshotPath, model) // after mincore: this read fills the cache
	}
}

// requireDirectIO fails under CI (and skips outside it) when dir's file system has no O_DIRECT:
// there the engine falls back to buffered writes and bypass cannot be told from keep.
func requireDirectIO(t *testing.T, dir string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "probe"), os.O_CREATE|os.O_WRONLY|unix.O_DIRECT, 0o600)
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("O_DIRECT not supported under %s (%v): set TMPDIR to a disk file system, as make test does", dir, err))
	}
	f.Close()
}
