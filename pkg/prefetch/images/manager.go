// Package images is the daemon part that keeps the configured images warm: for every image a
// wanted model serves (plus config.images) it resolves tags to digests every imagePull.resolveInterval,
// pulls with bounded concurrency, retries with backoff under a deadline that scales with the image's
// size, and records per image where it stands (queued, resolving, pulling layer i/n, unpacking,
// ready+pinned, failed+reason) in the images section of the node state. Images that leave the config
// get imagePull.onRemove. It owns scheduling and status, not registry or containerd I/O (the
// prefetch.Images backends do that) and not deciding which models this node wants (Wants is injected).
package images

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/state"
)

// Options tune the manager; zero values take the defaults named.
type Options struct {
	// Wants says which models' images this node needs; nil: Deps.Node's answer (every model when
	// Deps.Node is nil too).
	Wants func(config.Model) bool
	// Open builds the backend; default OpenWithPeers (containerd, embedded or auto per the config),
	// taking layers from warm peers with peers.enabled and an API server.
	Open func(context.Context, *config.NodeConfig, *slog.Logger) (prefetch.Images, error)
	// Attempts per pull before the image is reported failed. Default 5.
	Attempts int
	// Backoff is the first retry delay, doubling up to MaxBackoff. Defaults 2s and 1m.
	Backoff, MaxBackoff time.Duration
	// BaseDeadline plus size/MinThroughput bounds one pull attempt, so an 8.7 GB image gets its time
	// while a stuck small one does not hang for ever. Defaults 5m and 5 MiB/s.
	BaseDeadline  time.Duration
	MinThroughput int64
	// FailedRetry is the wait after a failed round before the next one. Default 5m (or the resolve
	// interval when shorter).
	FailedRetry time.Duration
	// VerifyInterval is how often a warm image is checked to still be present and pinned (no
	// registry traffic), so the status never claims an image someone removed. Default 30s.
	VerifyInterval time.Duration
	// OnProgress, when set, sees every progress report (the one-shot CLI draws bars from it).
	OnProgress func(name string, p prefetch.Progress)
}

func (o *Options) defaults() {
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.Backoff <= 0 {
		o.Backoff = 2 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Minute
	}
	if o.BaseDeadline <= 0 {
		o.BaseDeadline = 5 * time.Minute
	}
	if o.MinThroughput <= 0 {
		o.MinThroughput = 5 << 20
	}
	if o.FailedRetry <= 0 {
		o.FailedRetry = 5 * time.Minute
	}
	if o.VerifyInterval <= 0 {
		o.VerifyInterval = 30 * time.Second
	}
}

// Deadline is how long one pull attempt of size bytes may take.
func (o Options) Deadline(size int64) time.Duration {
	return o.BaseDeadline + time.Duration(float64(size)/float64(o.MinThroughput)*float64(time.Second))
}

// Manager is the images part.
type Manager struct {
	opts  Options
	log   *slog.Logger
	store *state.Store
	met   *metrics.Images

	// pubMu orders publishes: each takes a fresh snapshot under it, so an older view never
	// overwrites a newer one in the store or the gauges.
	pubMu    sync.Mutex
	mu       sync.Mutex
	cfg      *config.NodeConfig
	backend  prefetch.Images
	info     prefetch.BackendInfo
	openErr  string
	entries  map[string]*entry
	order    []string
	retained int
	sem      chan struct{} // pull slots (imagePull.concurrency)
	semSwap  chan struct{} // closed when a reload or a reopen replaces sem, so queued pulls move to the new one
	reconf   chan struct{}
	planned  bool // the first reconcile after open is done (Ready)
}

type entry struct {
	st     prefetch.ImageStatus
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}
	last   time.Time // last progress publish
}

var (
	_ daemon.Part           = (*Manager)(nil)
	_ daemon.Reconfigurable = (*Manager)(nil)
)

// New builds the manager from the daemon's dependencies. With a Node view in deps, images of models
// the node gains or loses through its labels follow at once.
func New(deps daemon.Deps, opts Options) *Manager {
	if opts.Wants == nil && deps.Node != nil {
		opts.Wants = deps.Node.Wanted
	}
	opts.defaults()
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var met *metrics.Images
	if deps.Metrics != nil {
		met = deps.Metrics.Images
	}
	m := &Manager{
		opts: opts, log: log.With("part", "images"), store: deps.Store, met: met, cfg: deps.Config,
		entries: map[string]*entry{}, reconf: make(chan struct{}, 1),
	}
	m.replaceSem(deps.Config.ImagePull.Concurrency)
	if m.opts.Open == nil {
		var pm *metrics.Peers
		if deps.Metrics != nil {
			pm = deps.Metrics.Peers
		}
		kube := deps.Kube
		m.opts.Open = func(ctx context.Context, cfg *config.NodeConfig, log *slog.Logger) (prefetch.Images, error) {
			return OpenWithPeers(ctx, cfg, log, m.backendPeers(cfg, kube, pm))
		}
	}
	if deps.Node != nil {
		deps.Node.OnLabels(m.Resync)
	}
	return m
}

// Ready implements daemon.Part: nil once the backend is open and the first plan is made (every
// wanted image has its state and its pull under way). A pull in progress does not hold it back: an
// 8 GB image may take many minutes, and the images section shows its progress.
func (m *Manager) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.openErr != "":
		return fmt.Errorf("image backend unavailable: %s", m.openErr)
	case !m.planned:
		return errors.New("opening the image backend")
	}
	return nil
}

// Name implements daemon.Part.
func (m *Manager) Name() string { return "images" }

// Reconfigure implements daemon.Reconfigurable: the run loop applies the new config.
func (m *Manager) Reconfigure(cfg *config.NodeConfig) {
	m.mu.Lock()
	m.cfg = cfg
	m.mu.Unlock()
	select {
	case m.reconf <- struct{}{}:
	default:
	}
}

// Resync recomputes the wanted images under the current config; call it when Wants' answers
// changed (the node's labels did) so images of models this node gained or lost follow.
func (m *Manager) Resync() {
	select {
	case m.reconf <- struct{}{}:
	default:
	}
}

// Run implements daemon.Part: it opens the backend (retrying while it is unavailable), keeps every
// wanted image warm, and reopens the backend when a reload changes how it is reached.
func (m *Manager) Run(ctx context.Context) error {
	for {
		cfg := m.config()
		b, err := m.open(ctx, cfg)
		if err != nil {
			return nil // ctx ended
		}
		key := BackendSettings(cfg)
		m.reconcile(ctx, true)
		m.mu.Lock()
		m.planned = true
		m.mu.Unlock()
		reopen := false
		for !reopen {
			select {
			case <-ctx.Done():
				m.stopAll()
				b.Close()
				return nil
			case <-m.reconf:
				if BackendSettings(m.config()) != key {
					m.log.Info("image backend settings changed; reopening")
					reopen = true
				}
				m.reconcile(ctx, false)
			}
		}
		m.stopAll()
		b.Close()
	}
}

func (m *Manager) config() *config.NodeConfig {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// replaceSem gives pulls n slots (at least one): pulls in flight finish on the old semaphore, and
// pulls queued on it move to the new one (acquire), so a reload that raises imagePull.concurrency
// starts the queued pulls at once. m.mu is held (or m is not shared yet).
func (m *Manager) replaceSem(n int) {
	if m.semSwap != nil {
		close(m.semSwap)
	}
	m.sem, m.semSwap = make(chan struct{}, max(1, n)), make(chan struct{})
}

// open retries until a backend opens or ctx ends, publishing why it cannot.
func (m *Manager) open(ctx context.Context, cfg *config.NodeConfig) (prefetch.Images, error) {
	delay := m.opts.Backoff
	for {
		b, err := m.opts.Open(ctx, cfg, m.log)
		if err == nil {
			m.mu.Lock()
			m.backend, m.info, m.openErr = b, b.Backend(), ""
			m.replaceSem(cfg.ImagePull.Concurrency)
			m.mu.Unlock()
			m.log.Info("image backend active", "backend", m.info.Name, "path", m.info.Path, "detail", m.info.Detail)
			m.publish()
			return b, nil
		}
		m.mu.Lock()
		m.backend, m.info, m.openErr = nil, prefetch.BackendInfo{}, err.Error()
		m.mu.Unlock()
		m.publish()
		m.log.Error("image backend unavailable; retrying", "err", err, "in", delay)
		if !sleep(ctx, delay) {
			return nil, ctx.Err()
		}
		delay = min(2*delay, m.opts.MaxBackoff)
	}
}

// reconcile starts workers for newly wanted images, stops and releases images no longer wanted, and
// (first after open) releases managed images left over from an earlier config.
func (m *Manager) reconcile(ctx context.Context, first bool) {
	cfg := m.config()
	want := Wanted(cfg, m.opts.Wants)
	keep := map[string]bool{}
	for _, w := range want {
		keep[w.Name] = true
	}
	m.mu.Lock()
	b := m.backend
	if cap(m.sem) != max(1, cfg.ImagePull.Concurrency) {
		m.replaceSem(cfg.ImagePull.Concurrency)
	}
	var gone []*entry
	var goneNames []string
	for name, e := range m.entries {
		if !keep[name] {
			gone = append(gone, e)
			goneNames = append(goneNames, name)
			delete(m.entries, name)
		}
	}
	m.order = m.order[:0]
	var start []*entry
	for _, w := range want {
		m.order = append(m.order, w.Name)
		if e, ok := m.entries[w.Name]; ok {
			e.st.Models, e.st.Ref = w.Models, w.Ref
			continue
		}
		e := &entry{st: prefetch.ImageStatus{Ref: w.Ref, Name: w.Name, Models: w.Models, State: prefetch.StateQueued},
			done: make(chan struct{}), wake: make(chan struct{}, 1)}
		if w.Err != nil {
			e.st.State, e.st.Reason = prefetch.StateFailed, state.Reason(w.Err)
			close(e.done)
		} else {
			start = append(start, e)
		}
		m.entries[w.Name] = e
	}
	m.mu.Unlock()

	for i, e := range gone {
		if e.cancel != nil {
			e.cancel()
		}
		<-e.done
		if err := b.Release(ctx, goneNames[i], cfg.ImagePull.OnRemove); err != nil {
			m.log.Error("release image that left the config", "image", goneNames[i], "policy", cfg.ImagePull.OnRemove, "err", err)
		} else {
			m.log.Info("image left the config", "image", goneNames[i], "policy", cfg.ImagePull.OnRemove)
		}
	}
	if first {
		m.releaseLeftovers(ctx, b, keep, cfg.ImagePull.OnRemove)
	}
	for _, e := range start {
		wctx, cancel := context.WithCancel(ctx)
		e.cancel = cancel
		go func() {
			defer close(e.done)
			m.worker(wctx, b, e)
		}()
	}
	m.publish()
}

// releaseLeftovers applies the removal policy to managed images no longer wanted (the config changed
// while warmd was down), so a restart loses nothing and leaks nothing.
func (m *Manager) releaseLeftovers(ctx context.Context, b prefetch.Images, keep map[string]bool, policy string) {
	managed, err := b.Managed(ctx)
	if err != nil {
		m.log.Error("list managed images", "err", err)
		return
	}
	retained := 0
	for _, l := range managed {
		if keep[l.Name] {
			continue
		}
		if policy == prefetch.OnRemoveKeep {
			retained++
			continue
		}
		if err := b.Release(ctx, l.Name, policy); err != nil {
			m.log.Error("release leftover image", "image", l.Name, "policy", policy, "err", err)
		} else {
			m.log.Info("released leftover image", "image", l.Name, "policy", policy)
		}
	}
	m.mu.Lock()
	m.retained = retained
	m.mu.Unlock()
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	es := make([]*entry, 0, len(m.entries))
	for _, e := range m.entries {
		es = append(es, e)
	}
	m.entries = map[string]*entry{}
	m.mu.Unlock()
	for _, e := range es {
		if e.cancel != nil {
			e.cancel()
		}
		<-e.done
	}
}

// Status returns the section as last published.
func (m *Manager) Status() prefetch.ImagesStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.statusLocked()
}

func (m *Manager) statusLocked() prefetch.ImagesStatus {
	s := prefetch.ImagesStatus{Backend: m.info, Error: m.openErr, Retained: m.retained, Images: []prefetch.ImageStatus{}}
	for _, name := range m.order {
		if e, ok := m.entries[name]; ok {
			st := e.st
			st.Models = slices.Clone(st.Models)
			s.Images = append(s.Images, st)
		}
	}
	return s
}

func (m *Manager) publish() {
	m.pubMu.Lock()
	defer m.pubMu.Unlock()
	m.mu.Lock()
	s := m.statusLocked()
	m.mu.Unlock()
	if m.met != nil { // gauges first: whoever sees the section sees the gauges it implies
		counts := map[prefetch.State]int{}
		for _, im := range s.Images {
			counts[im.State]++
		}
		for _, st := range allStates {
			m.met.ByState.WithLabelValues(string(st)).Set(float64(counts[st]))
		}
	}
	if m.store != nil {
		prefetch.ImagesSection.Publish(m.store, s)
	}
}

var allStates = []prefetch.State{prefetch.StateQueued, prefetch.StateResolving, prefetch.StatePulling,
	prefetch.StateUnpacking, prefetch.StateReady, prefetch.StateFailed}

// update mutates one entry under the lock and publishes.
func (m *Manager) update(e *entry, f func(*prefetch.ImageStatus)) {
	m.mu.Lock()
	f(&e.st)
	e.st.Updated = time.Now().UTC()
	m.mu.Unlock()
	m.publish()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
