package follow

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"warmd.io/warmd/pkg/state/statetest"

	"github.com/prometheus/client_golang/prometheus"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/state"
)

func TestPartFromConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.NodeConfig{DataDir: dir, Phases: config.Phases{PodLogDir: filepath.Join(dir, "pods"), Keep: 3}}
	f, err := NewPart(daemon.Deps{Config: cfg, Store: state.New(nil), Metrics: metrics.New(prometheus.NewRegistry())}, PartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Name() != "phases" || f.opts.Keep != 3 || f.opts.StateDir != filepath.Join(dir, "state") || f.opts.Dir != cfg.Phases.PodLogDir {
		t.Errorf("part %+v", f.opts)
	}
	if f.Ready() == nil {
		t.Error("ready before the first scan of the pod log dir")
	}
}

// TestPartFollowsReload runs the part and moves phases.podLogDir by a reload: the next scan reads the
// new dir, and Ready turned nil after the first scan.
func TestPartFollowsReload(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.NodeConfig{DataDir: dir, Phases: config.Phases{PodLogDir: filepath.Join(dir, "pods-a"), Keep: 3}}
	store := state.New(nil)
	f, err := NewPart(daemon.Deps{Config: cfg, Store: store}, PartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitPhases(t, store, "the first scan reports the missing dir", func(st phases.Status) bool {
		return st.PodLogDir == cfg.Phases.PodLogDir && len(st.Problems) == 1
	})
	for deadline := time.Now().Add(10 * time.Second); f.Ready() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready after the first scan: %v", f.Ready())
		}
	}
	next := *cfg
	next.Phases.PodLogDir = filepath.Join(dir, "pods-b")
	os.MkdirAll(next.Phases.PodLogDir, 0o755)
	f.Reconfigure(&next)
	waitPhases(t, store, "the reloaded dir is followed", func(st phases.Status) bool {
		return st.PodLogDir == next.Phases.PodLogDir && len(st.Problems) == 0
	})
}

func waitPhases(t *testing.T, store *state.Store, _ string, ok func(phases.Status) bool) {
	t.Helper()
	statetest.Wait(t, store, phases.Section, ok)
}
