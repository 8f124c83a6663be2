package weights_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
	"warmd.io/warmd/pkg/state"
	"warmd.io/warmd/pkg/state/statetest"
)

// runManager runs a manager until every wanted model settles (ready or failed) and returns the section.
func runManager(t *testing.T, cfg *config.NodeConfig, wants func(config.Model) bool) (prefetch.WeightsStatus, *metrics.Metrics) {
	t.Helper()
	store := state.New(nil)
	m := metrics.New(prometheus.NewRegistry())
	part, err := weights.NewManager(daemon.Deps{Config: cfg, Store: store, Metrics: m}, weights.ManagerOptions{Wants: wants})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- part.Run(ctx) }()
	defer func() { cancel(); <-done }()
	ws := statetest.Wait(t, store, prefetch.WeightsSection, func(ws prefetch.WeightsStatus) bool {
		settled := len(ws.Models) > 0
		for _, ms := range ws.Models {
			settled = settled && (ms.State == prefetch.StateReady || ms.State == prefetch.StateFailed)
		}
		return settled
	})
	if err := part.Ready(); err != nil {
		t.Errorf("every model settled, yet not ready: %v", err)
	}
	return ws, m
}

func TestManager(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	good := newFakeModel(40, 3<<20+5)
	good.writeDir(t, filepath.Join(src, "good"))
	bad := newFakeModel(41, 1000, 2000)
	delete(bad, "model-00002-of-00002.safetensors")
	bad.writeDir(t, filepath.Join(src, "bad"))
	cfg := &config.NodeConfig{DataDir: t.TempDir(), Models: []config.Model{
		{Name: "acme/good", Source: "file://" + filepath.Join(src, "good") + "/"},
		{Name: "acme/bad", Source: "file://" + filepath.Join(src, "bad") + "/"},
		{Name: "acme/elsewhere", Source: "file:///nonexistent/"},
	}}
	cfg.Default()
	wants := func(m config.Model) bool { return m.Name != "acme/elsewhere" }

	ws, m := runManager(t, cfg, wants)
	if len(ws.Models) != 2 {
		t.Fatalf("models %+v; want the two this node wants", ws.Models)
	}
	g, _ := ws.Model("acme/good")
	if !g.Verified("acme/good", "main") {
		t.Fatalf("good model %+v; want ready", g)
	}
	checkSnapshot(t, g.SnapshotPath, good)
	b, _ := ws.Model("acme/bad")
	if b.State != prefetch.StateFailed || !strings.Contains(b.Reason, "model-00002-of-00002.safetensors") {
		t.Errorf("bad model %+v; want failed naming the missing shard", b)
	}
	if got := testutil.ToFloat64(m.Weights.ByState.WithLabelValues("ready")); got != 1 {
		t.Errorf("warmd_weights_models{state=ready} = %v", got)
	}
	if got := testutil.ToFloat64(m.Weights.Bytes); got != float64(good.size()+bad.size()) {
		t.Errorf("warmd_weights_bytes_total = %v, want %d", got, good.size()+bad.size())
	}

	t.Run("restart re-verifies from disk without the source", func(t *testing.T) {
		if err := os.RemoveAll(filepath.Join(src, "good")); err != nil {
			t.Fatal(err)
		}
		ws, m := runManager(t, cfg, wants)
		g, _ := ws.Model("acme/good")
		if !g.Verified("acme/good", "main") {
			t.Fatalf("good model after restart %+v; want ready from disk", g)
		}
		if got := testutil.ToFloat64(m.Weights.Bytes); got != float64(bad.size()) {
			t.Errorf("downloaded %v bytes after restart; only the failed model should be fetched again (%d)", got, bad.size())
		}
	})
}

// TestReloadOfS3ReachesTheStore: an applied edit of the s3 section (here its endpoint) is the store
// the next pass fetches from, not the one the engine was first built with.
func TestReloadOfS3ReachesTheStore(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var endpoints []string
	newStore := func(_ context.Context, s config.S3) (objstore.Store, error) {
		mu.Lock()
		endpoints = append(endpoints, s.Endpoint)
		mu.Unlock()
		return objstore.NewMemory(), nil
	}
	asked := func(endpoint string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(endpoints, endpoint)
	}
	cfg := &config.NodeConfig{DataDir: t.TempDir(), S3: config.S3{Endpoint: "http://127.0.0.1:1"},
		Models: []config.Model{{Name: "acme/m", Source: "s3://bucket/m/"}}}
	cfg.Default()
	store := state.New(nil)
	part, err := weights.NewManager(daemon.Deps{Config: cfg, Store: store, Metrics: metrics.New(prometheus.NewRegistry())},
		weights.ManagerOptions{NewStore: newStore})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- part.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for !asked("http://127.0.0.1:1") {
		if ctx.Err() != nil {
			t.Fatalf("the first pass never opened the store; endpoints %v", endpoints)
		}
		time.Sleep(10 * time.Millisecond)
	}
	next := *cfg
	next.S3.Endpoint = "http://127.0.0.2:1"
	part.Reconfigure(&next)
	for !asked("http://127.0.0.2:1") {
		if ctx.Err() != nil {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("after a reload of s3.endpoint the store was never opened with it; endpoints %v", endpoints)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
