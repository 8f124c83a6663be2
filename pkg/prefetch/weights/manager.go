package weights

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
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/state"
)

// ManagerOptions configure the weights daemon part.
type ManagerOptions struct {
	// Wants says whether this node wants a model (its nodeSelector matches the node); nil: Deps.Node's
	// answer (every model when Deps.Node is nil too).
	Wants func(config.Model) bool
	// InUse reports whether a running pod on this node uses a model; nil: none does.
	InUse func(model string) bool
	// NewStore builds the S3 store; nil: objstore.NewS3 with the config's s3 section.
	NewStore func(ctx context.Context, cfg config.S3) (objstore.Store, error)
	// RetryBase is the first wait before a failed model is tried again (doubling up to 16×). Default 30s.
	RetryBase time.Duration
	// Recheck is how often in-use models are recorded and failures reconsidered. Default 1m.
	Recheck time.Duration
	// WrapOpen, when set, wraps the opener of each model's source under cfg (the peer source puts warm
	// peers in front of the origin); nil: the origin alone.
	WrapOpen func(cfg *config.NodeConfig, open OpenSource) OpenSource
}

// Manager is the daemon part that keeps the models this node wants fetched, verified and published,
// and publishes their status (prefetch.WeightsSection) and metrics.
type Manager struct {
	o       ManagerOptions
	log     *slog.Logger
	metrics *metrics.Weights
	store   *state.Store

	mu     sync.Mutex
	cfg    *config.NodeConfig
	wake   chan struct{}
	status map[string]prefetch.ModelStatus
	failed map[string]failure
	engine *Engine
	engKey string
	// ready is nil once the first inventory is done; until then why not.
	ready error
}

type failure struct {
	n    int
	next time.Time
}

var (
	_ daemon.Part           = (*Manager)(nil)
	_ daemon.Reconfigurable = (*Manager)(nil)
)

// NewManager returns the weights part. With a Node view in d, models the node gains through its
// labels are fetched at once rather than at the next recheck.
func NewManager(d daemon.Deps, o ManagerOptions) (*Manager, error) {
	if d.Config == nil || d.Store == nil || d.Metrics == nil {
		return nil, errors.New("weights manager: config, state store and metrics are required")
	}
	if o.Wants == nil && d.Node != nil {
		o.Wants = d.Node.Wanted
	}
	if o.Wants == nil {
		o.Wants = func(config.Model) bool { return true }
	}
	if o.InUse == nil {
		o.InUse = func(string) bool { return false }
	}
	if o.NewStore == nil {
		o.NewStore = func(ctx context.Context, cfg config.S3) (objstore.Store, error) {
			return objstore.NewS3(ctx, cfg, objstore.Options{MaxConns: 2 * d.Config.Weights.Concurrency, Log: d.Log})
		}
	}
	if o.RetryBase <= 0 {
		o.RetryBase = 30 * time.Second
	}
	if o.Recheck <= 0 {
		o.Recheck = time.Minute
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{o: o, log: log.With("part", "weights"), metrics: d.Metrics.Weights, store: d.Store, cfg: d.Config,
		wake: make(chan struct{}, 1), status: map[string]prefetch.ModelStatus{}, failed: map[string]failure{},
		ready: errors.New("first inventory of the weights on disk not done")}
	if d.Node != nil {
		d.Node.OnLabels(m.poke)
	}
	return m, nil
}

// Ready implements daemon.Part: nil once the first pass has checked every wanted model on disk (a
// model that is missing is then queued or downloading; its download does not hold Ready back).
func (m *Manager) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ready
}

// poke starts a pass now (the config or the node's labels changed).
func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Name implements daemon.Part.
func (m *Manager) Name() string { return "weights" }

// Reconfigure implements daemon.Reconfigurable: the next pass uses cfg (tuning changes rebuild the
// engine between fetches; a model whose source or revision changed is fetched again).
func (m *Manager) Reconfigure(cfg *config.NodeConfig) {
	m.mu.Lock()
	m.cfg = cfg
	m.failed = map[string]failure{}
	m.mu.Unlock()
	m.poke()
}

func engineOptions(cfg *config.NodeConfig) Options {
	return Options{DataDir: cfg.DataDir, Concurrency: cfg.Weights.Concurrency, ChunkSize: cfg.Weights.ChunkSize.Value(),
		BandwidthLimit: cfg.Weights.BandwidthLimit.Value(), Budget: cfg.Weights.Budget.Value(), InUseWindow: cfg.Weights.InUseWindow.Duration,
		BufferedIO: cfg.Weights.PageCache == config.PageCacheKeep}
}

// EngineSettings is what the engine and its source openers are built from: the weights tuning, the
// s3 section and the peers section (as JSON, so pointers and quantities compare by value). A reload
// that changes it rebuilds the engine between fetches. Exported for the test that walks every
// NodeConfig setting (pkg/assemble).
func EngineSettings(cfg *config.NodeConfig) string {
	b, _ := json.Marshal([]any{cfg.S3, cfg.Peers})
	return fmt.Sprintf("%+v %s", engineOptions(cfg), b) // Options holds funcs: not JSON
}

// engineFor returns the engine for cfg, rebuilding it when the weights tuning, the s3 section or the
// peers section changed.
func (m *Manager) engineFor(cfg *config.NodeConfig) (*Engine, error) {
	o := engineOptions(cfg)
	key := EngineSettings(cfg)
	if m.engine != nil && m.engKey == key {
		return m.engine, nil
	}
	s3cfg := cfg.S3
	o.Open = SourceOpener(func(ctx context.Context) (objstore.Store, error) { return m.o.NewStore(ctx, s3cfg) })
	if m.o.WrapOpen != nil {
		o.Open = m.o.WrapOpen(cfg, o.Open)
	}
	o.InUse = m.o.InUse
	o.OnBytes = func(n int64) { m.metrics.Bytes.Add(float64(n)) }
	o.Log = m.log
	e, err := New(o)
	if err != nil {
		return nil, err
	}
	if m.engine != nil {
		m.engine.Close() // passes run one at a time: nothing fetches through it any more
	}
	m.engine, m.engKey = e, key
	return e, nil
}

// Run implements daemon.Part.
func (m *Manager) Run(ctx context.Context) error {
	for {
		next := m.pass(ctx)
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			if m.engine != nil {
				m.engine.Close()
			}
			return nil
		case <-m.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// pass brings every wanted model to ready (or failed) once and returns when to look again.
func (m *Manager) pass(ctx context.Context) time.Duration {
	m.mu.Lock()
	cfg := m.cfg
	m.mu.Unlock()
	next := m.o.Recheck
	e, err := m.engineFor(cfg)
	if err != nil {
		m.log.Error("weights engine unavailable", "err", err)
		m.mu.Lock()
		if m.ready != nil {
			m.ready = fmt.Errorf("weights engine unavailable: %w", err)
		}
		m.mu.Unlock()
		return m.o.RetryBase
	}
	var wanted []config.Model
	for _, md := range cfg.Models {
		if m.o.Wants(md) {
			wanted = append(wanted, md)
		}
	}
	m.mu.Lock()
	keep := map[string]bool{}
	for _, md := range wanted {
		keep[md.Name] = true
		if st, ok := m.status[md.Name]; !ok || st.Revision != md.Revision || st.Source != md.Source {
			m.status[md.Name] = prefetch.ModelStatus{Model: md.Name, Revision: md.Revision, Source: md.Source, State: prefetch.StateQueued}
		}
	}
	for name := range m.status {
		if !keep[name] {
			delete(m.status, name) // files stay; the budget may evict them once unused
		}
	}
	m.mu.Unlock()
	m.publish(e, wanted)
	// Inventory first: re-verify what is on disk before touching the network (works with the store
	// down), so every model already here is ready before the first download starts.
	for _, md := range wanted {
		m.mu.Lock()
		st := m.status[md.Name]
		m.mu.Unlock()
		if st.State != prefetch.StateQueued {
			continue
		}
		if cur, err := e.Check(md); err == nil {
			m.setStatus(e, wanted, cur)
			m.log.Info("model verified on disk", "model", md.Name, "revision", md.Revision, "snapshot", cur.SnapshotPath)
		}
	}
	m.mu.Lock()
	m.ready = nil
	m.mu.Unlock()
	for _, md := range wanted {
		if ctx.Err() != nil {
			return next
		}
		m.mu.Lock()
		st := m.status[md.Name]
		f, hasFailed := m.failed[md.Name]
		m.mu.Unlock()
		if st.State == prefetch.StateReady {
			if m.o.InUse(md.Name) {
				e.Touch(md.Name)
			}
			continue
		}
		if hasFailed && time.Now().Before(f.next) {
			next = min(next, time.Until(f.next))
			continue
		}
		start := time.Now()
		var lastPub time.Time
		res, err := e.Fetch(ctx, md, func(s prefetch.ModelStatus) {
			if s.State != prefetch.StateDownloading || time.Since(lastPub) > time.Second {
				lastPub = time.Now()
				m.setStatus(e, wanted, s)
			}
		})
		result := "ok"
		if err != nil {
			if ctx.Err() != nil {
				return next
			}
			result = "error"
			m.mu.Lock()
			f := m.failed[md.Name]
			f.n++
			wait := m.o.RetryBase << min(f.n-1, 4)
			f.next = time.Now().Add(wait)
			m.failed[md.Name] = f
			m.mu.Unlock()
			next = min(next, wait)
			m.log.Error("model fetch failed", "model", md.Name, "err", err, "retry_in", wait.String())
		} else {
			m.mu.Lock()
			delete(m.failed, md.Name)
			m.mu.Unlock()
		}
		m.metrics.DownloadSeconds.WithLabelValues(md.Name, result).Observe(time.Since(start).Seconds())
		m.setStatus(e, wanted, res)
	}
	return next
}

func (m *Manager) setStatus(e *Engine, wanted []config.Model, s prefetch.ModelStatus) {
	m.mu.Lock()
	if _, ok := m.status[s.Model]; ok {
		m.status[s.Model] = s
	}
	m.mu.Unlock()
	m.publish(e, wanted)
}

// publish writes the weights section (in config order) and the per-state gauge.
func (m *Manager) publish(e *Engine, wanted []config.Model) {
	m.mu.Lock()
	ws := prefetch.WeightsStatus{CacheRoot: e.CacheRoot(), BudgetBytes: e.opts.Budget, UsedBytes: e.UsedBytes()}
	counts := map[prefetch.State]int{}
	for _, md := range wanted {
		if st, ok := m.status[md.Name]; ok {
			ws.Models = append(ws.Models, st)
			counts[st.State]++
		}
	}
	m.mu.Unlock()
	for _, s := range []prefetch.State{prefetch.StateQueued, prefetch.StateDownloading, prefetch.StateVerifying, prefetch.StateReady, prefetch.StateFailed} {
		m.metrics.ByState.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	prefetch.WeightsSection.Publish(m.store, ws)
}
