package follow

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/state"
	"warmd.io/warmd/pkg/state/statetest"
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

// TestKeepFollowsReload: a reload that lowers phases.keep keeps only that many records from the
// next one on, in memory and in the records file a restart reads (pkg/assemble's walk of every
// setting names this test).
func TestKeepFollowsReload(t *testing.T) {
	root := t.TempDir()
	podLogs, stateDir := filepath.Join(root, "pods"), filepath.Join(root, "state")
	f := newFollower(t, podLogs, stateDir, metrics.New(prometheus.NewRegistry()), state.New(nil)) // keep 10
	cold := strings.Join(fixture(t, "seed-7b-cold.log"), "")
	start := func(i int) {
		newKubeletLog(t, podLogs, "default", fmt.Sprintf("vllm-%d", i), fmt.Sprintf("uid-%d", i), "vllm", 0).write(cold)
	}
	for i := range 3 {
		start(i)
	}
	f.Sync()
	if n := len(f.Records()); n != 3 {
		t.Fatalf("%d records of 3 starts under keep 10", n)
	}
	f.Reconfigure(&config.NodeConfig{DataDir: root, Phases: config.Phases{PodLogDir: podLogs, Keep: 2}})
	f.applyPending(nil) // what Run does before its next pass
	start(3)
	f.Sync()
	var pods []string
	for _, r := range f.Records() {
		pods = append(pods, r.Pod)
	}
	if strings.Join(pods, " ") != "vllm-2 vllm-3" {
		t.Errorf("records after the reload to keep 2 are of %v, want the newest two [vllm-2 vllm-3]", pods)
	}
	again := newFollower(t, podLogs, stateDir, metrics.New(prometheus.NewRegistry()), state.New(nil))
	if n := len(again.Records()); n != 2 {
		t.Errorf("a restart reads %d records from the file, want the 2 the reload kept", n)
	}
}

func waitPhases(t *testing.T, store *state.Store, _ string, ok func(phases.Status) bool) {
	t.Helper()
	statetest.Wait(t, store, phases.Section, ok)
}
