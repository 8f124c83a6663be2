package nvml

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/state"
)

// scripted is a Detector that returns its readings in order, then repeats the last one.
type scripted struct {
	readings []reading
	n        int
}

type reading struct {
	inv Inventory
	err error
}

func (s *scripted) Detect(context.Context) (Inventory, error) {
	r := s.readings[min(s.n, len(s.readings)-1)]
	s.n++
	return r.inv, r.err
}

func newTestPart(t *testing.T, det Detector, gfd bool) (*Part, *state.Store, *metrics.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	store := state.New(nil)
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cfg := &config.NodeConfig{GPU: config.GPU{GFDLabels: gfd}}
	p := NewPart(daemon.Deps{Config: cfg, Store: store, Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		PartOptions{Detector: det, Now: func() time.Time { clock = clock.Add(time.Minute); return clock }})
	return p, store, m
}

func TestPartPublishes(t *testing.T) {
	h100 := inventory(8, "NVIDIA H100 80GB HBM3", "9.0", "570.124.06", "12.8")
	broken := h100
	broken.Devices = h100.Devices[:7]
	broken.SKU = SKUKey(broken)
	errLost := errors.New("GPU 7 GetName: ERROR_GPU_IS_LOST")
	tests := []struct {
		name      string
		readings  []reading
		wantSKU   string
		stale     bool
		lastError string
		count     float64
	}{
		{name: "no GPU", readings: []reading{{inv: Absent("null", NoGPUReason)}}, wantSKU: SKUNone},
		{name: "8x H100", readings: []reading{{inv: h100}}, wantSKU: h100.SKU, count: 8},
		{name: "a failing re-detection keeps the known SKU", readings: []reading{{inv: h100}, {inv: broken, err: errLost}},
			wantSKU: h100.SKU, stale: true, lastError: "ERROR_GPU_IS_LOST", count: 8},
		{name: "a failing first detection is published as unknown", readings: []reading{{inv: broken, err: errLost}},
			wantSKU: SKUUnknown, lastError: "ERROR_GPU_IS_LOST", count: 7},
		{name: "recovery replaces the stale reading", readings: []reading{{inv: h100}, {inv: broken, err: errLost}, {inv: h100}},
			wantSKU: h100.SKU, count: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, store, m := newTestPart(t, &scripted{readings: tt.readings}, false)
			for range tt.readings {
				p.Detect(context.Background())
			}
			st, ok := Section.Get(store)
			if !ok {
				t.Fatal("no gpu section published")
			}
			if st.Inventory.SKU != tt.wantSKU || st.Stale != tt.stale || !strings.Contains(st.LastError, tt.lastError) ||
				st.Labels[nodelabels.LabelSKU] != tt.wantSKU || st.Detections != len(tt.readings) || st.Cacheable != Cacheable(tt.wantSKU) {
				t.Errorf("status sku %q stale %v lastError %q label %q detections %d cacheable %v",
					st.Inventory.SKU, st.Stale, st.LastError, st.Labels[nodelabels.LabelSKU], st.Detections, st.Cacheable)
			}
			if got := testutil.ToFloat64(m.GPU.Count); got != tt.count {
				t.Errorf("warmd_gpu_count = %v, want %v", got, tt.count)
			}
			if n := testutil.CollectAndCount(m.GPU.Info); n != 1 {
				t.Errorf("warmd_gpu_info has %d series, want 1", n)
			}
			if got := testutil.ToFloat64(m.GPU.Info.WithLabelValues(tt.wantSKU, productLabel(st.Inventory), st.Inventory.DriverVersion)); got != 1 {
				t.Errorf("warmd_gpu_info{sku=%q} = %v", tt.wantSKU, got)
			}
		})
	}
}

func productLabel(inv Inventory) string {
	if !inv.Present {
		return ""
	}
	return productSummary(inv.Products())
}

func TestPartReconfigureGFD(t *testing.T) {
	p, store, _ := newTestPart(t, &scripted{readings: []reading{{inv: inventory(2, "NVIDIA H200", "9.0", "570.124.06", "12.8")}}}, false)
	p.Detect(context.Background())
	st, _ := Section.Get(store)
	if _, ok := st.Labels["nvidia.com/gpu.product"]; ok {
		t.Fatal("GFD labels without gfdLabels")
	}
	cfg := &config.NodeConfig{GPU: config.GPU{GFDLabels: true}}
	p.Reconfigure(cfg)
	st, _ = Section.Get(store)
	if got := st.Labels["nvidia.com/gpu.product"]; got != "NVIDIA-H200" {
		t.Errorf("after reconfigure nvidia.com/gpu.product = %q", got)
	}
}

func TestPartRunStopsWithContext(t *testing.T) {
	p, store, _ := newTestPart(t, Null{}, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	if _, err := store.WaitNewer(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v after cancel, want nil", err)
	}
	if st := p.Current(); st.Inventory.SKU != SKUNone || st.Inventory.Backend != "null" {
		t.Errorf("null status %+v", st)
	}
}

// TestPartReadyAfterFirstDetection: the gpu part's first pass is one detection, whatever it found
// (here: no GPU), and the SKU it published is what nvml.SKU reads for the other parts.
func TestPartReadyAfterFirstDetection(t *testing.T) {
	p, store, _ := newTestPart(t, &scripted{readings: []reading{{inv: Inventory{SKU: SKUNone}}}}, false)
	if p.Ready() == nil {
		t.Error("ready before any detection")
	}
	if got := SKU(store)(); got != "" {
		t.Errorf("SKU before detection = %q, want empty", got)
	}
	p.Detect(context.Background())
	if err := p.Ready(); err != nil {
		t.Errorf("not ready after a detection: %v", err)
	}
	if got := SKU(store)(); got != SKUNone {
		t.Errorf("SKU = %q, want %q", got, SKUNone)
	}
}
