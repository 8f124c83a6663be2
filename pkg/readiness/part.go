package readiness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/kubeconfig"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/nodewatch"
	"warmd.io/warmd/pkg/predict"
	"warmd.io/warmd/pkg/state"
)

// InputFunc turns the node-state snapshot into the facts Evaluate needs. The daemon supplies it,
// because only it knows every part's status type; wants tells whether a configured model selects
// this node (from the Node's labels, see nodewatch.Watcher.Wants).
type InputFunc func(snap state.Snapshot, cfg *config.NodeConfig, wants func(config.Model) bool) Input

// Section is the readiness section of the node state.
var Section = state.NewKey[Status]("readiness")

// Status is the readiness section of /v1/status (Section).
type Status struct {
	Node         string                `json:"node"`
	NodeKnown    bool                  `json:"nodeKnown"`
	Warm         bool                  `json:"warm"`
	StartupTaint bool                  `json:"startupTaint"`
	Models       map[string]ModelState `json:"models,omitempty"`
	Labels       nodelabels.Labels     `json:"labels,omitempty"`
	Condition    Condition             `json:"condition"`
	LastSync     *SyncResult           `json:"lastSync,omitempty"`
	// Predictions is the time-to-ready prediction per wanted model with its breakdown.
	Predictions *predict.Status `json:"predictions,omitempty"`
}

// Part is the daemon part that keeps the Node current: fed by the node watcher, a Writer, and a
// loop that rebuilds the Input whenever the state store or the Node's labels change.
type Part struct {
	store   *state.Store
	log     *slog.Logger
	input   InputFunc
	watcher daemon.NodeView
	writer  *Writer
	events  *Events
	metrics *metrics.Readiness
	clk     clock.WithTicker

	upstream []daemon.Part // waited for before the first write (Options.Upstream)
	grace    time.Duration // at most this long (Options.FirstPassGrace)
	waiting  string        // why the first write waits; empty once it no longer does

	mu  sync.Mutex
	cfg *config.NodeConfig
	st  Status
	rc  chan struct{}
}

var (
	_ daemon.Part           = (*Part)(nil)
	_ daemon.Reconfigurable = (*Part)(nil)
)

// Options are the readiness part's seams.
type Options struct {
	// Input builds the Input from the node state (pkg/readiness/fromstate.Input in the daemon).
	Input InputFunc
	// Clock paces the Node writer; clock.RealClock when nil (tests pass a fake one).
	Clock clock.WithTicker
	// Upstream are the parts whose facts the Input reads. The first write of the Node waits until
	// each has finished its first pass (Ready() == nil), at most FirstPassGrace: on a restart the
	// Node still carries the last run's labels, and writing before, say, the image part has looked
	// into containerd again would flip a warm model to cold and back (two writes, a condition
	// transition and a moment in which a scheduler sees the node cold for nothing).
	Upstream []daemon.Part
	// FirstPassGrace bounds that wait (default DefaultFirstPassGrace): a part that cannot finish
	// (containerd down) must not keep labels that may no longer be true on the Node for long.
	FirstPassGrace time.Duration
}

// DefaultFirstPassGrace is how long the first Node write waits for the upstream parts' first pass.
// Their first passes are local checks (containerd's image list, the weights' journal, the compile
// cache's tree), normally done in a second or two; a minute covers a slow disk without leaving a
// stale label up for long.
const DefaultFirstPassGrace = time.Minute

// New returns the readiness part. With an API client in d (d.Kube, and d.Node watching this node) it
// is Part, which writes the Node; without one (readiness.disabled) it is the API-less LocalPart, which
// evaluates and reports warm state but writes no Node.
func New(d daemon.Deps, o Options) (daemon.Part, error) {
	if d.Kube == nil {
		return NewLocalPart(d, o.Input), nil
	}
	if d.Node == nil {
		return nil, errors.New("readiness: the API client needs the node watcher (Deps.Node)")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.FirstPassGrace <= 0 {
		o.FirstPassGrace = DefaultFirstPassGrace
	}
	p := newPart(d, o.Clock, o.Input)
	p.upstream, p.grace = o.Upstream, o.FirstPassGrace
	return p, nil
}

// RESTConfig loads readiness.kubeconfig: the file at path, or the in-cluster config when path is
// empty (kubeconfig.ForDaemon).
func RESTConfig(path string) (*rest.Config, error) {
	c, err := kubeconfig.ForDaemon(path, "readiness.kubeconfig, or readiness.disabled: true")
	if err != nil {
		return nil, fmt.Errorf("readiness: %w", err)
	}
	return c, nil
}

// newPart builds the part on d's client and Node watcher.
func newPart(d daemon.Deps, clk clock.WithTicker, input InputFunc) *Part {
	client := d.Kube
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Part{store: d.Store, log: log, input: input, cfg: d.Config, rc: make(chan struct{}, 1), clk: clk}
	p.st = Status{Node: d.Config.NodeName, StartupTaint: d.Config.Readiness.StartupTaint}
	p.watcher = d.Node
	var m = d.Metrics
	wo := WriterOptions{
		NodeName: d.Config.NodeName, Client: client, Clock: clk, Log: log,
		Resync: d.Config.Readiness.Resync.Duration, StartupTaint: d.Config.Readiness.StartupTaint,
		OnSync: p.onSync,
	}
	if m != nil {
		wo.Metrics = m.Readiness
		p.metrics = m.Readiness
	}
	p.events = NewEvents(client, d.Config.NodeName, EventOptions{}, log)
	wo.Events = p.events
	p.writer = NewWriter(wo)
	p.watcher.OnNode(p.writer.ObserveNode)
	return p
}

// Name implements daemon.Part.
func (p *Part) Name() string { return "readiness" }

// Ready implements daemon.Part: nil once the first round of the Node writer ran (it waits for the
// first read of the Node, see nodewatch).
func (p *Part) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting != "" {
		return fmt.Errorf("first write of the Node waits for the first pass of %s", p.waiting)
	}
	if p.st.LastSync == nil {
		return errors.New("first write of the Node's labels and condition not done")
	}
	return nil
}

// Reconfigure implements daemon.Reconfigurable: models, selectors and the startup taint take effect
// at once. The API connection and resync period are fixed at start.
func (p *Part) Reconfigure(cfg *config.NodeConfig) {
	p.mu.Lock()
	p.cfg = cfg
	p.st.StartupTaint = cfg.Readiness.StartupTaint
	p.mu.Unlock()
	p.writer.SetStartupTaint(cfg.Readiness.StartupTaint)
	select {
	case p.rc <- struct{}{}:
	default:
	}
}

// Run implements daemon.Part.
func (p *Part) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.writer.Run(ctx) })
	g.Go(func() error { return p.loop(ctx) })
	err := g.Wait()
	p.events.Shutdown()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// loop rebuilds the input after every store publish, Node change or reconfigure. It waits for the
// first copy of the Node: until then no selector can be evaluated, and publishing "not wanted" for
// every model would remove labels that are still true.
func (p *Part) loop(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-p.watcher.Synced():
	}
	if !p.awaitUpstream(ctx) {
		return nil
	}
	for {
		storeCh, nodeCh := p.store.Changed(), p.watcher.Changed()
		p.mu.Lock()
		cfg := p.cfg
		p.mu.Unlock()
		labels := p.watcher.Labels()
		wants := func(m config.Model) bool {
			ok, err := nodewatch.ModelWanted(m, labels)
			return ok && err == nil
		}
		in := p.input(p.store.Snapshot(), cfg, wants)
		p.setPredictions(in.Predictions)
		p.writer.SetInput(in)
		select {
		case <-ctx.Done():
			return nil
		case <-storeCh:
		case <-nodeCh:
		case <-p.rc:
		}
		// Parts publish in bursts; a short pause lets one input cover them (the writer rate-limits too).
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// awaitUpstream holds the first write until every upstream part has finished its first pass or the
// grace is over (then it writes what is known and logs which parts were late). False when ctx ended.
func (p *Part) awaitUpstream(ctx context.Context) bool {
	deadline := p.clk.Now().Add(p.grace)
	tick := p.clk.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	defer p.setWaiting("")
	for {
		var late []string
		for _, u := range p.upstream {
			if u.Ready() != nil {
				late = append(late, u.Name())
			}
		}
		if len(late) == 0 {
			return true
		}
		if !p.clk.Now().Before(deadline) {
			p.log.Warn("writing the Node before every part finished its first pass",
				"late", late, "waited", p.grace.String())
			return true
		}
		p.setWaiting(fmt.Sprintf("%v (at most %s)", late, p.grace))
		select {
		case <-ctx.Done():
			return false
		case <-tick.C():
		}
	}
}

func (p *Part) setWaiting(s string) {
	p.mu.Lock()
	p.waiting = s
	p.mu.Unlock()
}

// setPredictions exports the predictions as the warmd_predicted_ready_seconds gauge (series of models
// no longer predicted are dropped) and keeps the detail for the status section.
func (p *Part) setPredictions(pr Predictions) {
	if p.metrics != nil {
		p.metrics.PredictedReady.Reset()
		for model, s := range pr.Seconds {
			p.metrics.PredictedReady.WithLabelValues(model).Set(s)
		}
	}
	p.mu.Lock()
	p.st.Predictions = pr.Detail
	p.mu.Unlock()
}

func (p *Part) onSync(r SyncResult) {
	p.mu.Lock()
	st := p.st
	st.NodeKnown = !r.NodeMissing
	if d := r.Desired; d != nil {
		st.Warm, st.Labels, st.Condition = d.Warm, d.Labels, d.Condition
		st.Models = make(map[string]ModelState, len(d.Models))
		for _, m := range d.Models {
			st.Models[m.Name] = m
		}
	}
	// Publish only when something other than the round's time changed: every publish wakes loop.
	prev := p.st.LastSync
	changed := prev == nil || !reflect.DeepEqual(st, p.st) || prev.Error != r.Error || prev.Writes != r.Writes ||
		!slices.Equal(prev.Blocked, r.Blocked)
	st.LastSync = &r
	p.st = st
	p.mu.Unlock()
	if changed {
		Section.Publish(p.store, st)
	}
}
