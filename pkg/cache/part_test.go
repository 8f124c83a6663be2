package cache

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/state"
	"warmd.io/warmd/pkg/state/statetest"
)

func newTestPart(t *testing.T, store objstore.Store, sku func() string) (*Part, *state.Store, *metrics.Metrics, string) {
	t.Helper()
	cfg := &config.NodeConfig{DataDir: t.TempDir(), NodeName: "n1"}
	cfg.CompileCache.Remote = "s3://cache-part/warmd"
	cfg.CompileCache.QuietPeriod = metav1.Duration{Duration: 50 * time.Millisecond}
	st := state.New(nil)
	m := metrics.New(metrics.NewRegistry())
	p, err := NewPart(daemon.Deps{Config: cfg, Store: st, Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		PartOptions{SKU: sku, Store: store, Tick: 20 * time.Millisecond, RestoreInterval: time.Hour})
	if err != nil || p == nil {
		t.Fatalf("NewPart: %v", err)
	}
	return p, st, m, cfg.DataDir
}

// TestPartCapturesUploadsAndReports runs the daemon part: it waits for a cacheable SKU, restores,
// watches, captures what a "pod" writes after the quiet period, uploads it, and publishes status and
// metrics; a second node's part restores it at start.
func TestPartCapturesUploadsAndReports(t *testing.T) {
	t.Parallel()
	store := objstore.NewMemory()
	var mu sync.Mutex
	sku := ""
	p, st, m, dataDir := newTestPart(t, store, func() string { mu.Lock(); defer mu.Unlock(); return sku })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	statetest.Wait(t, st, Section, func(s Status) bool { return s.State == StateWaiting })
	mu.Lock()
	sku = skuA
	mu.Unlock()
	statetest.Wait(t, st, Section, func(s Status) bool { return s.State == StateReady })

	// A pod compiles a FlashInfer op into the tree (through the node link, as a pod's mount does).
	op := filepath.Join(dataDir, "compile-cache", NodeLink, "flashinfer/.cache/flashinfer/0.4.1/90a/cached_ops/op")
	os.MkdirAll(op, 0o755)
	os.WriteFile(filepath.Join(op, "op.so"), make([]byte, 300<<10), 0o755)
	s := statetest.Wait(t, st, Section, func(s Status) bool { return s.Uploaded >= 1 })
	if s.SKU != skuA || s.BundlesLocal != 1 || s.Components[3].Name != ComponentFlashInfer || s.Components[3].Files != 1 {
		t.Fatalf("status after capture: %+v", s)
	}
	if got := testutil.ToFloat64(m.Cache.Bundles.WithLabelValues("uploaded")); got != 1 {
		t.Fatalf("uploaded bundles metric = %v", got)
	}
	if got := testutil.ToFloat64(m.Cache.Bytes.WithLabelValues(ComponentFlashInfer)); got != 300<<10 {
		t.Fatalf("flashinfer bytes metric = %v", got)
	}
	v := p.ReportStart(StartReport{Time: time.Now(), Compiled: false})
	if !v.Hit || testutil.ToFloat64(m.Cache.Starts.WithLabelValues("hit")) != 1 {
		t.Fatalf("start verdict %+v", v)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Another node of the same SKU restores the bundle at start.
	p2, st2, _, dataDir2 := newTestPart(t, store, func() string { return skuA })
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- p2.Run(ctx2) }()
	defer func() { cancel2(); <-done2 }() // stop before TempDir cleanup removes its tree
	statetest.Wait(t, st2, Section, func(s Status) bool { return s.Restored == 1 && s.State == StateReady })
	if b, err := os.ReadFile(filepath.Join(dataDir2, "compile-cache", skuA, "flashinfer/.cache/flashinfer/0.4.1/90a/cached_ops/op/op.so")); err != nil || len(b) != 300<<10 {
		t.Fatalf("second node's restored op.so: %d bytes, %v", len(b), err)
	}
}

// TestPartDisabled: with compileCache.disabled at start the part exists, is ready and reports
// "disabled"; a reload that clears the switch opens the SKU's tree with no restart, and one that
// sets it again reports "disabled" again.
func TestPartDisabled(t *testing.T) {
	t.Parallel()
	cfg := &config.NodeConfig{DataDir: t.TempDir(), NodeName: "n1"}
	cfg.CompileCache.Disabled = true
	st := state.New(nil)
	p, err := NewPart(daemon.Deps{Config: cfg, Store: st, Metrics: metrics.New(metrics.NewRegistry()), Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		PartOptions{SKU: func() string { return skuA }, Tick: 20 * time.Millisecond, RestoreInterval: time.Hour})
	if p == nil || err != nil {
		t.Fatalf("disabled at start: part %v, err %v; want a part", p, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	statetest.Wait(t, st, Section, func(s Status) bool { return s.State == StateDisabled })
	if err := p.Ready(); err != nil {
		t.Errorf("a disabled part is not ready: %v", err)
	}
	if p.Manager() != nil {
		t.Error("a disabled part opened a tree")
	}
	on := *cfg
	on.CompileCache.Disabled = false
	p.Reconfigure(&on)
	statetest.Wait(t, st, Section, func(s Status) bool { return s.State == StateReady && s.SKU == skuA })
	off := on
	off.CompileCache.Disabled = true
	p.Reconfigure(&off)
	statetest.Wait(t, st, Section, func(s Status) bool { return s.State == StateDisabled })
}

// TestPartFollowsRecordedStarts: the part reads recorded starts from the phases section itself,
// counting each new one once (starts recorded before it began were the previous run's), and is ready
// once its SKU's tree is open, not before the SKU is known.
func TestPartFollowsRecordedStarts(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	sku := ""
	p, st, m, _ := newTestPart(t, objstore.NewMemory(), func() string { mu.Lock(); defer mu.Unlock(); return sku })
	old := phases.Record{Pod: "old", Result: phases.Result{CompileCache: phases.CacheHit, StartedAt: time.Now()}}
	phases.Section.Publish(st, phases.Status{Records: []phases.Record{old}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	statetest.Wait(t, st, Section, func(s Status) bool { return s.State == StateWaiting })
	if p.Ready() == nil {
		t.Error("ready before the SKU is known")
	}
	mu.Lock()
	sku = skuA
	mu.Unlock()
	statetest.Wait(t, st, Section, func(s Status) bool { return s.State == StateReady })
	if err := p.Ready(); err != nil {
		t.Errorf("not ready with the tree open: %v", err)
	}
	started := phases.Record{Pod: "new", Result: phases.Result{CompileCache: phases.CacheHit, StartedAt: time.Now()}}
	phases.Section.Publish(st, phases.Status{Records: []phases.Record{started, old}})
	statetest.Wait(t, st, Section, func(s Status) bool { return s.Hits == 1 })
	if got := testutil.ToFloat64(m.Cache.Starts.WithLabelValues("hit")); got != 1 {
		t.Errorf("hit starts metric = %v, want 1 (the earlier record is not counted again)", got)
	}
}
