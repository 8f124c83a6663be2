package prewarm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/hfcache"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/podwatch"
	"warmd.io/warmd/pkg/state"
	"warmd.io/warmd/pkg/vllm"
)

// Options adjust the part; the zero value is what the daemon runs.
type Options struct {
	// Client reaches the API server; nil builds one from readiness.kubeconfig (in-cluster when empty).
	Client kube.Interface
	// MemInfo is the /proc/meminfo-format file the budget reads. Default MemInfo.
	MemInfo string
	// Resync re-checks the pods without an event, so a model published after its pod was bound is
	// still pre-warmed while the pod starts. Default 5s.
	Resync time.Duration
	// OnBytes, when set, is told of every chunk a pre-warm reads (tests pace a run with it).
	OnBytes func(model string, n int64)
}

// Part watches the Pods bound to this node and pre-warms the model of each vLLM pod that is starting.
type Part struct {
	log     *slog.Logger
	store   *state.Store
	metrics *metrics.Prewarm
	pods    daemon.PodWatch // this node's one pod watch, shared with the key check
	root    *fsroot.Root    // the weights cache root, <dataDir>/weights
	opts    Options
	node    string
	kick    chan struct{}
	wg      sync.WaitGroup

	mu     sync.Mutex
	cfg    *config.NodeConfig
	runs   map[string]*active // by model
	warmed map[types.UID]bool // pods whose pre-warm ended: not started again
	recent []Run
	sub    podwatch.Subscription // while watching: its Problem is the section's
	synced atomic.Bool           // the pod watch listed once (Ready)
}

type active struct {
	Run
	pod    types.UID
	ctx    context.Context // ends when the run is cancelled
	cancel context.CancelCauseFunc
	bytes  atomic.Int64
}

var (
	_ daemon.Part           = (*Part)(nil)
	_ daemon.Reconfigurable = (*Part)(nil)
)

// New builds the part, or returns nil (and no error) with readiness.disabled (no API server, so no
// way to see pods bound here; that switch is on daemon.RestartNeeded). With prewarm.disabled the part
// exists, reports the state "disabled" and watches nothing until a reload clears it.
func New(deps daemon.Deps, opts Options) (*Part, error) {
	cfg := deps.Config
	if cfg.Readiness.Disabled {
		return nil, nil
	}
	if opts.MemInfo == "" {
		opts.MemInfo = MemInfo
	}
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Second
	}
	if opts.Client == nil {
		opts.Client = deps.Kube // the daemon's one API client
	}
	if opts.Client == nil {
		return nil, errors.New("prewarm: no API client (readiness.disabled leaves pre-warming off)")
	}
	data, err := fsroot.Open(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("prewarm: %w", err)
	}
	defer data.Close()
	root, err := data.Sub(fsroot.MustPath("weights"))
	if err != nil {
		return nil, fmt.Errorf("prewarm: weights cache root: %w", err)
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var m *metrics.Prewarm
	if deps.Metrics != nil && deps.Metrics.Prewarm != nil {
		m = deps.Metrics.Prewarm
	} else { // counted, but exported nowhere
		m = metrics.New(prometheus.NewRegistry()).Prewarm
	}
	pods := deps.Pods
	if pods == nil {
		pods = podwatch.New(opts.Client, cfg.NodeName)
	}
	return &Part{log: log.With("part", "prewarm"), store: deps.Store, metrics: m, pods: pods, root: root,
		opts: opts, node: cfg.NodeName, cfg: cfg, kick: make(chan struct{}, 1),
		runs: map[string]*active{}, warmed: map[types.UID]bool{}}, nil
}

// Name implements daemon.Part.
func (p *Part) Name() string { return "prewarm" }

// Ready implements daemon.Part: nil once the watch of this node's pods has listed them once, so a
// pod already bound when warmd starts is seen.
func (p *Part) Ready() error {
	if !p.synced.Load() && !p.disabled() {
		return errors.New("waiting for the first list of this node's pods")
	}
	return nil
}

// Reconfigure takes a new config: the models (and their revisions) and the caps apply to the next
// pre-warm; prewarm.disabled stops the running ones.
func (p *Part) Reconfigure(cfg *config.NodeConfig) {
	p.mu.Lock()
	p.cfg = cfg
	p.mu.Unlock()
	p.poke()
}

func (p *Part) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// disabled reports whether prewarm.disabled is set in the current config.
func (p *Part) disabled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.Prewarm.Disabled
}

// Run watches this node's pods (field selector spec.nodeName, one watch per node) until ctx ends,
// then cancels the running pre-warms and waits for them. While prewarm.disabled is set from the
// start it watches nothing and waits for a reload that clears it; once watching, a reload that sets
// it again cancels the running pre-warms and starts none.
func (p *Part) Run(ctx context.Context) error {
	defer p.root.Close()
	for p.disabled() {
		p.publish()
		select {
		case <-ctx.Done():
			return nil
		case <-p.kick:
		}
	}
	sub, err := p.pods.Subscribe()
	if err != nil {
		return fmt.Errorf("prewarm: watch pods of node %s: %w", p.node, err)
	}
	p.mu.Lock()
	p.sub = sub
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.sub = nil
		p.mu.Unlock()
		sub.Close()
	}()
	p.publish()
	tick := time.NewTicker(p.opts.Resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			p.stopAll(errors.New("warmd is stopping"))
			p.wg.Wait()
			p.publish()
			return nil
		case <-p.kick:
		case <-sub.Changed():
		case <-tick.C:
		}
		if !sub.Synced() {
			continue
		}
		p.synced.Store(true)
		pods, err := sub.Pods()
		if err != nil {
			p.log.Warn("list pods from the watch cache", "err", err)
			continue
		}
		p.reconcile(ctx, pods)
		p.publish()
	}
}

// notStarting says why pod no longer needs a pre-warm, "" while it is bound here, alive and not yet
// ready: its vLLM container has not started, or is starting (importing, loading). A ready pod has
// loaded its weights already.
func (p *Part) notStarting(pod *corev1.Pod) string {
	switch {
	case pod.Spec.NodeName != p.node:
		return "the pod is not bound to this node"
	case pod.DeletionTimestamp != nil:
		return "the pod is being deleted"
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return "the pod ended"
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return "the pod is ready (its weights are loaded)"
		}
	}
	return ""
}

// reconcile starts a pre-warm for each configured model a starting pod serves and cancels the ones
// whose pods are gone, ending or ready.
func (p *Part) reconcile(ctx context.Context, pods []*corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	models := map[string]config.Model{}
	if !p.cfg.Prewarm.Disabled {
		for _, m := range p.cfg.Models {
			models[m.Name] = m
		}
	}
	want := map[string]*corev1.Pod{} // model → a starting pod that serves it and was not pre-warmed for
	seen := map[types.UID]string{}   // every pod here → why it needs no pre-warm ("" while starting)
	for _, pod := range pods {
		why := p.notStarting(pod)
		seen[pod.UID] = why
		if why != "" {
			continue
		}
		name := vllm.PodModel(pod)
		if _, ok := models[name]; !ok {
			continue // not a vLLM pod, or a model warmd does not manage
		}
		switch r := p.runs[name]; {
		case r != nil && r.pod == pod.UID:
			want[name] = pod // its own run goes on
		case p.warmed[pod.UID]:
		case want[name] == nil:
			want[name] = pod // a run for another pod of the model serves this one too
		}
	}
	for uid := range p.warmed {
		if _, ok := seen[uid]; !ok {
			delete(p.warmed, uid)
		}
	}
	for name, r := range p.runs {
		if want[name] == nil {
			why, ok := seen[r.pod]
			switch {
			case !ok:
				why = "the pod is gone"
			case why == "":
				why = "the model is no longer configured"
			}
			if p.cfg.Prewarm.Disabled {
				why = "prewarm was disabled"
			}
			r.cancel(errors.New(why))
		}
	}
	for name, pod := range want {
		if _, running := p.runs[name]; !running {
			p.start(ctx, models[name], pod)
		}
	}
}

// start begins a pre-warm of m for pod (p.mu held). A model not published yet is left for a later
// reconcile: the weights part may publish it while the pod still starts.
func (p *Part) start(ctx context.Context, m config.Model, pod *corev1.Pod) {
	r := Run{Model: m.Name, Revision: m.Revision, Pod: pod.Namespace + "/" + pod.Name, Started: time.Now().UTC()}
	snap, err := hfcache.SnapshotDir(m.Name, m.Revision)
	if err != nil {
		p.end(r, pod.UID, OutcomeFailed, err.Error())
		return
	}
	files, err := hfcache.List(p.root, snap)
	if errors.Is(err, hfcache.ErrNotPublished) {
		p.log.Debug("pod starts before its model is published; waiting", "model", m.Name, "pod", r.Pod)
		return
	}
	if err != nil {
		p.end(r, pod.UID, OutcomeFailed, err.Error())
		return
	}
	for _, f := range files {
		r.Total += f.Size
	}
	var held int64
	for _, a := range p.runs {
		held += a.Budget
	}
	avail, err := MemAvailable(p.opts.MemInfo)
	if err != nil {
		p.log.Warn("cannot read available memory; the pre-warm is capped by prewarm.maxBytes alone", "err", err)
		avail = 1 << 62
	}
	r.Budget = Budget(p.cfg.Prewarm.MaxBytes.Value(), p.cfg.Prewarm.MemAvailablePercent, avail, held)
	if r.Budget <= 0 {
		p.end(r, pod.UID, OutcomeSkipped, "no memory budget left")
		return
	}
	r.Outcome = OutcomeRunning
	runCtx, cancel := context.WithCancelCause(ctx)
	a := &active{Run: r, pod: pod.UID, ctx: runCtx, cancel: cancel}
	p.runs[m.Name] = a
	p.metrics.Runs.WithLabelValues("started").Inc()
	p.log.Info("pre-warming weights into the page cache", "model", m.Name, "pod", r.Pod, "budget", r.Budget, "total", r.Total)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		res, err := Warm(runCtx, p.root, snap, r.Budget, func(n int64) {
			a.bytes.Add(n)
			p.metrics.Bytes.Add(float64(n))
			if p.opts.OnBytes != nil {
				p.opts.OnBytes(m.Name, n)
			}
		})
		cancel(nil)
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.runs, m.Name)
		a.Bytes, a.Total = res.Bytes, res.Total
		switch {
		case err == nil:
			reason := ""
			if res.BudgetHit {
				reason = fmt.Sprintf("budget reached (%d of %d bytes)", res.Bytes, res.Total)
			}
			p.end(a.Run, a.pod, OutcomeFinished, reason)
		case runCtx.Err() != nil:
			p.endCancelled(a, context.Cause(runCtx))
		default:
			p.end(a.Run, a.pod, OutcomeFailed, err.Error())
		}
		p.poke() // another pod may wait for this model, or for budget
	}()
}

func (p *Part) endCancelled(a *active, cause error) {
	reason := "cancelled"
	if cause != nil {
		reason = cause.Error()
	}
	p.end(a.Run, "", OutcomeCancelled, reason) // not marked warmed: a pod that comes back is pre-warmed again
}

// end records a run that ended (p.mu held); uid, when set, is not pre-warmed for again.
func (p *Part) end(r Run, uid types.UID, outcome, reason string) {
	r.Ended, r.Outcome, r.Reason = time.Now().UTC(), outcome, reason
	if uid != "" {
		p.warmed[uid] = true
	}
	if outcome != OutcomeSkipped {
		p.metrics.Runs.WithLabelValues(outcome).Inc()
	}
	log := p.log.Info
	if outcome == OutcomeFailed {
		log = p.log.Warn
	}
	log("pre-warm ended", "model", r.Model, "pod", r.Pod, "outcome", outcome, "bytes", r.Bytes, "reason", reason,
		"took", r.Ended.Sub(r.Started).Round(time.Millisecond).String())
	p.recent = slices.Insert(p.recent, 0, r)
	if len(p.recent) > maxRecent {
		p.recent = p.recent[:maxRecent]
	}
}

func (p *Part) stopAll(cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.runs {
		a.cancel(cause)
	}
}
