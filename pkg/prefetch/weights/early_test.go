package weights_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
)

// gatedSource holds back every range of one file until open is closed.
type gatedSource struct {
	prefetch.Source
	file string
	open chan struct{}
}

func (g gatedSource) GetRange(ctx context.Context, name fsroot.Path, off, n int64, w io.Writer) (int64, error) {
	if name.String() == g.file {
		select {
		case <-g.open:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return g.Source.GetRange(ctx, name, off, n, w)
}

// Each file is verified as its last chunk lands and named in the status's Staged (what the peer
// server serves of a revision in flight) while the rest still downloads; nothing else is named, and
// the list is gone once the model is published.
func TestVerifiedFilesAreStagedBeforeReady(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	model := newFakeModel(3, 3<<20+5, 2<<20+7)
	model.writeDir(t, src)
	const held = "model-00002-of-00002.safetensors"
	g := gatedSource{file: held, open: make(chan struct{})}
	data := t.TempDir()
	e := newEngine(t, data, func(o *weights.Options) {
		inner := weights.SourceOpener(nil)
		o.Open = func(ctx context.Context, m config.Model) (prefetch.Source, error) {
			s, err := inner(ctx, m)
			g.Source = s
			return g, err
		}
		o.ProgressInterval = 10 * time.Millisecond
	})
	var (
		mu     sync.Mutex
		staged map[string]string
		state  prefetch.State
		served *prefetch.Servable
		once   sync.Once
	)
	done := make(chan struct{})
	progress := func(s prefetch.ModelStatus) {
		mu.Lock()
		defer mu.Unlock()
		if s.State == prefetch.StateDownloading && len(s.Staged) == len(model)-1 {
			staged, state, served = s.Staged, s.State, s.Servable
			once.Do(func() { close(done) })
		}
	}
	var (
		st  prefetch.ModelStatus
		err error
	)
	fetched := make(chan struct{})
	go func() {
		defer close(fetched)
		st, err = e.Fetch(context.Background(), fileModel("acme/staged", src), progress)
	}()
	select {
	case <-done:
	case <-fetched:
		t.Fatalf("the fetch ended (%v) before every file but the held one was staged", err)
	case <-time.After(30 * time.Second):
		mu.Lock()
		t.Fatalf("no status named every file but %s verified; last %v", held, staged)
	}
	mu.Lock()
	if _, ok := staged[held]; ok || state != prefetch.StateDownloading {
		t.Errorf("the file still downloading is named staged (%v, %s)", staged, state)
	}
	if served == nil || served.Files != len(staged) || served.PartFiles != 0 {
		t.Errorf("Servable %+v beside %d staged files, want them counted", served, len(staged))
	}
	for name, rel := range staged {
		got, rerr := os.ReadFile(filepath.Join(data, "weights", rel))
		if rerr != nil || !bytes.Equal(got, model[name]) {
			t.Errorf("staged %s at %s: %d bytes (%v), want the source's %d", name, rel, len(got), rerr, len(model[name]))
		}
	}
	mu.Unlock()
	close(g.open)
	<-fetched
	if err != nil || st.State != prefetch.StateReady || st.Staged != nil || st.Servable != nil {
		t.Fatalf("after the held file: %s, staged %v, servable %+v, %v", st.State, st.Staged, st.Servable, err)
	}
	checkSnapshot(t, st.SnapshotPath, model)
}
