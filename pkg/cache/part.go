package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/state"
)

// PartOptions are the daemon part's seams.
type PartOptions struct {
	// SKU returns the node's SKU key (pkg/nvml's, through the gpu section); the part waits while it
	// is empty or not cacheable and rebuilds its manager when it changes.
	SKU func() string
	// Store overrides the S3 client built from the config (tests).
	Store objstore.Store
	// Running returns the configured models running pods on this node serve; their per-model vLLM
	// trees (see PodEnv) are never evicted. nil: none.
	Running func() []string
	// OpenWriters is Options.OpenWriters.
	OpenWriters func() (map[FileID]bool, error)
	// RestoreInterval is how often the SKU's index is read again. Default 10m.
	RestoreInterval time.Duration
	// Tick is how often the part checks the watch and the SKU. Default 1s.
	Tick time.Duration
	// Peers overrides the peer options built from peers.* and the API client (NewPeerOptions, from
	// the config each SKU tree opens with, so a reload that turns peers on reaches them); with them,
	// verified bundles are kept for peers and restores ask peers before the bucket.
	Peers *PeerOptions
}

// Section is the compile-cache part's section of the node state.
var Section = state.NewKey[Status]("compileCache")

// State is where the compile-cache part stands; readiness holds a model cold until StateReady for the
// node's SKU.
type State string

// The compile-cache part's states (the values of /v1/status compileCache.state).
const (
	// StateWaiting: no cacheable SKU yet, or the cache could not be set up for it.
	StateWaiting State = "waiting"
	// StateRestoring: the first restore of this SKU's tree is running.
	StateRestoring State = "restoring"
	// StateReady: everything the fleet captured for this SKU is on disk; watching for new entries.
	StateReady State = "ready"
	// StateError: the cache cannot run for this SKU (see Message).
	StateError State = "error"
	// StateDisabled: compileCache.disabled is set (at start or by a reload); nothing is kept until
	// it is cleared.
	StateDisabled State = "disabled"
)

// Status is the compileCache section of the node state (Section).
type Status struct {
	// State is "" only in a status built outside the part (warmd cache status).
	State      State             `json:"state"`
	SKU        string            `json:"sku,omitempty"`
	Root       string            `json:"root,omitempty"`
	Remote     string            `json:"remote,omitempty"`
	Budget     int64             `json:"budget,omitempty"`
	Bytes      int64             `json:"bytes"`
	Components []ComponentStatus `json:"components,omitempty"`
	// BundlesLocal are live bundles on this node; Stats.RemoteBundles those in the SKU's index.
	BundlesLocal int `json:"bundlesLocal"`
	// KeptBundles and KeptBytes are the verified bundles kept for peers (KeptDir).
	KeptBundles int    `json:"keptBundles,omitempty"`
	KeptBytes   int64  `json:"keptBytes,omitempty"`
	Message     string `json:"message,omitempty"`
	Stats
}

// ComponentStatus is one component's share of the tree.
type ComponentStatus struct {
	Name    string `json:"name"`
	Bytes   int64  `json:"bytes"`
	Files   int    `json:"files"`
	Bundles int    `json:"bundles"`
}

// Part runs compile-cache management in the daemon. It also follows the starts pkg/phases records
// (the phases section), once each, to judge hits and count a start that compiled although its SKU's
// cache had been restored (warmd_compile_cache_restored_but_missed_total).
type Part struct {
	deps  daemon.Deps // what NewPeerOptions builds from, with the current config
	store *state.Store
	m     *metrics.Cache
	log   *slog.Logger
	o     PartOptions

	mu        sync.Mutex
	cfg       *config.NodeConfig
	mgr       *Manager
	last      Stats // counters already added to metrics
	firstPass error // nil once the first pass is done (Ready)
	reconf    chan struct{}
}

var (
	_ daemon.Part           = (*Part)(nil)
	_ daemon.Reconfigurable = (*Part)(nil)
)

// NewPart builds the part. It exists with compileCache.disabled too: it then reports the state
// "disabled", opens nothing, and a reload that clears the switch starts its work (one that sets it
// stops it).
func NewPart(d daemon.Deps, o PartOptions) (*Part, error) {
	if o.SKU == nil {
		return nil, fmt.Errorf("compile-cache part needs the SKU source (wire the gpu part's SKU)")
	}
	if o.RestoreInterval <= 0 {
		o.RestoreInterval = 10 * time.Minute
	}
	if o.Tick <= 0 {
		o.Tick = time.Second
	}
	return &Part{deps: d, cfg: d.Config, store: d.Store, m: d.Metrics.Cache, log: d.Log.With("part", "cache"), o: o,
		firstPass: errors.New("waiting for the GPU SKU key"), reconf: make(chan struct{}, 1)}, nil
}

// Reconfigure implements daemon.Reconfigurable: a change of the compileCache or s3 settings reopens
// the SKU's tree with them (between captures); compileCache.disabled stops the work.
func (p *Part) Reconfigure(cfg *config.NodeConfig) {
	p.mu.Lock()
	p.cfg = cfg
	p.mu.Unlock()
	select {
	case p.reconf <- struct{}{}:
	default:
	}
}

func (p *Part) config() *config.NodeConfig {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// Settings is what a running SKU tree is opened with (peers.* decide whether bundles are kept and
// which peers are asked, how): a reload that changes it reopens the tree. Exported for the test
// that walks every NodeConfig setting (pkg/assemble).
func Settings(cfg *config.NodeConfig) string {
	b, _ := json.Marshal([]any{cfg.CompileCache, cfg.S3, cfg.Peers}) // by value: pointers and quantities
	return string(b)
}

// Ready implements daemon.Part: nil once the part knows the SKU and either the SKU is not cacheable
// (nothing to do) or its tree is open and measured. The first restore from S3 does not hold it back:
// the compileCache section shows its progress.
func (p *Part) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firstPass
}

func (p *Part) setReady(err error) {
	p.mu.Lock()
	p.firstPass = err
	p.mu.Unlock()
}

// Name implements daemon.Part.
func (p *Part) Name() string { return "cache" }

// Manager returns the current manager (nil while waiting for a SKU).
func (p *Part) Manager() *Manager {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mgr
}

// Run implements daemon.Part.
func (p *Part) Run(ctx context.Context) error {
	starts := make(chan struct{})
	go func() { defer close(starts); p.followStarts(ctx) }()
	defer func() { <-starts }()
	p.publish(Status{State: StateWaiting, Message: "waiting for the GPU SKU key"})
	t := time.NewTicker(p.o.Tick)
	defer t.Stop()
	for {
		sku := p.o.SKU()
		switch err := CheckSKU(sku); {
		case p.config().CompileCache.Disabled:
			p.setReady(nil)
			p.publish(Status{State: StateDisabled, Message: "compileCache.disabled is set"})
		case err == nil:
			if err := p.runSKU(ctx, sku); err != nil {
				p.log.Error("compile caches stopped", "err", err)
				p.setReady(fmt.Errorf("compile caches stopped: %w", err))
				p.publish(Status{State: StateError, SKU: sku, Message: state.Reason(err)})
			}
		case sku == "":
			p.publish(Status{State: StateWaiting, Message: "waiting for the GPU SKU key"})
		default: // known, not cacheable: the pass is done, nothing to keep
			p.setReady(nil)
			p.publish(Status{State: StateWaiting, SKU: sku, Message: state.Reason(err)})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-p.reconf:
		}
	}
}

// runSKU manages one SKU's tree until ctx ends, the SKU changes or a reload changes its settings.
func (p *Part) runSKU(ctx context.Context, sku string) error {
	cfg := p.config()
	cc := cfg.CompileCache
	o := Options{DataDir: cfg.DataDir, SKU: sku, Node: cfg.NodeName, Budget: cc.Budget.Value(), Sync: true,
		InUse: p.inUse, OpenWriters: p.o.OpenWriters, Log: p.log,
		// Bundles are kept only for peers: see Options.KeepBundles for why not by default.
		KeepBundles: cfg.Peers.Enabled}
	if cfg.Peers.Enabled {
		o.Peers = p.o.Peers
		if o.Peers == nil {
			d := p.deps
			d.Config = cfg
			o.Peers = NewPeerOptions(d) // nil without an API client: kept and served, fetched from the bucket
		}
	}
	if cc.Remote != "" {
		bucket, prefix, err := config.ParseS3URL(cc.Remote)
		if err != nil {
			return fmt.Errorf("compileCache.remote: %w", err)
		}
		o.Store, o.Bucket, o.Prefix = p.o.Store, bucket, prefix
		if o.Store == nil {
			s3, err := objstore.NewS3(ctx, cfg.S3, objstore.Options{Log: p.log, MaxConns: 32})
			if err != nil {
				return err
			}
			o.Store = s3
		}
	}
	mgr, err := NewManager(o)
	if err != nil {
		return err
	}
	defer mgr.Close()
	mgr.dropKept()
	p.mu.Lock()
	p.mgr = mgr
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.mgr = nil
		p.mu.Unlock()
	}()
	p.publishMgr(mgr, StateRestoring)
	p.setReady(nil)
	if _, err := mgr.Restore(ctx); err != nil && ctx.Err() == nil {
		p.log.Warn("initial compile-cache restore failed; retrying later", "err", err)
	}
	p.publishMgr(mgr, StateReady)
	w, err := NewWatcher(mgr.r.tree, cc.QuietPeriod.Duration, nil)
	if err != nil {
		return fmt.Errorf("watch %s: %w", mgr.Layout().Root(), err)
	}
	defer w.Close()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go w.Run(wctx)
	t := time.NewTicker(p.o.Tick)
	defer t.Stop()
	lastRestore := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if cur := p.o.SKU(); cur != sku {
			p.log.Warn("SKU key changed; switching compile-cache tree", "from", sku, "to", cur)
			return nil
		}
		if next := p.config(); Settings(next) != Settings(cfg) {
			p.log.Info("compile-cache settings changed by a reload; reopening the tree")
			return nil
		}
		acted := false
		if w.Due() {
			res, err := mgr.Capture(ctx)
			if err != nil {
				p.log.Warn("capture failed", "err", err)
				mgr.setError(err)
			}
			if res.Pending > 0 {
				w.Again()
			}
			acted = true
		}
		if time.Since(lastRestore) >= p.o.RestoreInterval {
			lastRestore = time.Now()
			if _, err := mgr.Restore(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("compile-cache restore failed", "err", err)
			}
			acted = true
		}
		if acted {
			if _, err := mgr.Upload(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("compile-cache upload failed; retrying after the next capture or restore", "err", err)
				mgr.setError(err)
			}
			if _, err := mgr.Evict(); err != nil {
				p.log.Warn("compile-cache eviction failed", "err", err)
			}
			p.publishMgr(mgr, StateReady)
		}
	}
}

// ReportStart feeds one vLLM start (from pkg/phases) to hit/miss accounting.
func (p *Part) ReportStart(r StartReport) StartVerdict {
	mgr := p.Manager()
	if mgr == nil {
		return StartVerdict{}
	}
	v := mgr.ReportStart(r)
	switch {
	case v.Hit:
		p.m.Starts.WithLabelValues("hit").Inc()
	case v.Miss:
		p.m.Starts.WithLabelValues("miss").Inc()
		p.m.RestoredButMissed.Inc()
		p.log.Warn("vLLM compiled although its SKU's cache was restored", "reason", v.Reason)
	}
	p.publishMgr(mgr, StateReady)
	return v
}

func (p *Part) publish(s Status) { Section.Publish(p.store, s) }

// Snapshot builds the status of mgr (it measures the tree).
func Snapshot(mgr *Manager, st State, remote string) Status {
	s := Status{State: st, SKU: mgr.o.SKU, Root: mgr.layout.Root(), Remote: remote, Budget: mgr.o.Budget, Stats: mgr.Stats()}
	bytes, files, err := mgr.TreeBytes()
	if err != nil {
		s.Message = state.Reason(err)
	}
	bundles := map[string]int{}
	for _, r := range mgr.Records() {
		if r.Live() {
			bundles[r.Manifest.Component]++
			s.BundlesLocal++
		}
	}
	s.KeptBundles, s.KeptBytes = mgr.KeptBundles()
	for _, c := range Components {
		s.Components = append(s.Components, ComponentStatus{Name: c, Bytes: bytes[c], Files: files[c], Bundles: bundles[c]})
		s.Bytes += bytes[c]
	}
	return s
}

func (p *Part) publishMgr(mgr *Manager, st State) {
	s := Snapshot(mgr, st, p.config().CompileCache.Remote)
	for _, c := range s.Components {
		p.m.Bytes.WithLabelValues(c.Name).Set(float64(c.Bytes))
		p.m.Files.WithLabelValues(c.Name).Set(float64(c.Files))
	}
	p.mu.Lock()
	for op, d := range map[string]int{
		"captured": s.Captured - p.last.Captured, "uploaded": s.Uploaded - p.last.Uploaded,
		"restored": s.Restored - p.last.Restored, "rejected": s.Rejected - p.last.Rejected, "evicted": s.Evicted - p.last.Evicted,
	} {
		if d > 0 {
			p.m.Bundles.WithLabelValues(op).Add(float64(d))
		}
	}
	p.last = s.Stats
	p.mu.Unlock()
	p.publish(s)
}
