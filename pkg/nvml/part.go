package nvml

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/state"
)

// DefaultInterval is how often the part re-detects: GPUs and drivers change only with maintenance
// (driver upgrade, MIG reconfiguration, a GPU falling off the bus), so minutes are plenty.
const DefaultInterval = 5 * time.Minute

// Section is the gpu section of the node state: the GPU identity pkg/cache keys caches by and
// readiness labels the Node with.
var Section = state.NewKey[Status]("gpu")

// Status is the gpu section of /v1/status (Section).
type Status struct {
	Inventory Inventory `json:"inventory"`
	// Labels are the identity labels for the current inventory, as readiness will publish them.
	Labels nodelabels.Labels `json:"labels"`
	// Cacheable says whether compile caches may be keyed by Inventory.SKU (see Cacheable).
	Cacheable bool `json:"cacheable"`
	// Detected is when Inventory was read; LastAttempt when detection last ran.
	Detected    time.Time `json:"detected"`
	LastAttempt time.Time `json:"lastAttempt"`
	Detections  int       `json:"detections"`
	// LastError is the last detection's error; with Stale set the inventory is an older, better reading
	// kept because the last one could not establish the SKU.
	LastError string `json:"lastError,omitempty"`
	Stale     bool   `json:"stale,omitempty"`
}

// NewStatus builds the status of one reading; the gpu command and the part share it.
func NewStatus(inv Inventory, err error, opt LabelOptions, now time.Time) Status {
	s := Status{Inventory: inv, Labels: IdentityLabels(inv, opt), Cacheable: Cacheable(inv.SKU),
		Detected: now, LastAttempt: now, Detections: 1}
	if err != nil {
		s.LastError = err.Error()
	}
	return s
}

// PartOptions configure the daemon part.
type PartOptions struct {
	// Detector reads the GPUs (DetectorFromEnv over go-nvml in the daemon).
	Detector Detector
	// Interval between detections; DefaultInterval when zero.
	Interval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Part detects the GPU inventory at start and every Interval, publishes Section and the
// warmd_gpu_* metrics. Detection errors never stop it: they are logged and shown in the status.
type Part struct {
	det   Detector
	store *state.Store
	m     *metrics.GPU
	log   *slog.Logger
	opt   PartOptions

	mu   sync.Mutex
	gfd  bool   // config gpu.gfdLabels; guarded by mu
	last Status // guarded by mu
}

// NewPart returns the gpu part; gpu.gfdLabels comes from the config and follows reloads.
func NewPart(d daemon.Deps, opt PartOptions) *Part {
	if opt.Interval <= 0 {
		opt.Interval = DefaultInterval
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var m *metrics.GPU
	if d.Metrics != nil {
		m = d.Metrics.GPU
	}
	return &Part{det: opt.Detector, store: d.Store, m: m, log: log.With("part", "gpu"), opt: opt, gfd: d.Config.GPU.GFDLabels}
}

var (
	_ daemon.Part           = (*Part)(nil)
	_ daemon.Reconfigurable = (*Part)(nil)
)

// Ready implements daemon.Part: nil once the first detection ran (whatever it found: a node without
// a GPU is a finished pass too).
func (p *Part) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last.Detections == 0 {
		return errors.New("first GPU detection not done")
	}
	return nil
}

// SKU returns the SKU key the gpu part published in store ("none" without a GPU, "unknown" when NVML
// could not tell), "" before the first detection. The compile-cache part and the phases follower key
// by it; the cache refuses the non-keys itself (cache.CheckSKU).
func SKU(store *state.Store) func() string {
	return func() string {
		st, _ := Section.Get(store)
		return st.Inventory.SKU
	}
}

// Name is the part's name in logs and the daemon status.
func (p *Part) Name() string { return "gpu" }

// Run detects now and then every Interval until ctx ends; it returns nil then.
func (p *Part) Run(ctx context.Context) error {
	t := time.NewTicker(p.opt.Interval)
	defer t.Stop()
	for {
		p.Detect(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Detect runs one detection and publishes the result. A reading whose SKU is unknown does not replace
// an earlier reading with a known SKU (a transient NVML failure must not flip cache keys and labels);
// it is recorded as LastError with Stale set instead.
func (p *Part) Detect(ctx context.Context) Status {
	inv, err := p.det.Detect(ctx)
	now := p.opt.Now().UTC()
	p.mu.Lock()
	defer p.mu.Unlock()
	next := NewStatus(inv, err, LabelOptions{GFD: p.gfd}, now)
	next.Detections = p.last.Detections + 1
	if inv.SKU == SKUUnknown && p.last.Detections > 0 && p.last.Inventory.SKU != SKUUnknown {
		next = p.last
		next.LastAttempt, next.Detections, next.Stale = now, p.last.Detections+1, true
		next.LastError = "latest detection could not establish the SKU; keeping the previous reading"
		if err != nil {
			next.LastError += ": " + err.Error()
		}
	}
	if err != nil {
		p.log.Warn("GPU detection incomplete", "err", err, "sku", next.Inventory.SKU, "stale", next.Stale)
	}
	if p.last.Inventory.SKU != next.Inventory.SKU || p.last.Detections == 0 {
		p.log.Info("GPU identity", "summary", next.Inventory.Summary(), "sku", next.Inventory.SKU,
			"cacheable", next.Cacheable)
	}
	p.last = next
	p.publishLocked()
	return next
}

// Reconfigure applies a new gpu.gfdLabels setting to the published labels.
func (p *Part) Reconfigure(cfg *config.NodeConfig) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cfg.GPU.GFDLabels == p.gfd {
		return
	}
	p.gfd = cfg.GPU.GFDLabels
	if p.last.Detections > 0 {
		p.last.Labels = IdentityLabels(p.last.Inventory, LabelOptions{GFD: p.gfd})
		p.publishLocked()
	}
}

// Current returns the last published status (zero before the first detection).
func (p *Part) Current() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

func (p *Part) publishLocked() {
	s := p.last
	s.Labels = s.Labels.Merge() // readers share the published value; keep ours private
	Section.Publish(p.store, s)
	if p.m == nil {
		return
	}
	inv := s.Inventory
	product := productSummary(inv.Products())
	if !inv.Present {
		product = ""
	}
	p.m.Info.Reset()
	p.m.Info.WithLabelValues(inv.SKU, product, inv.DriverVersion).Set(1)
	p.m.Count.Set(float64(len(inv.Devices)))
}
