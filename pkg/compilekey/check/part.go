// Package check is the daemon side of the compile-cache key check: it keeps the inputs of every vLLM
// start recorded on this node (pod spec and log, compilekey.Inputs), and when a vLLM pod is bound here
// and its container has not started yet, predicts with compilekey.Compare whether its torch.compile
// cache will hit. The verdict goes to the compileKey status section (`warmd status`, and readiness's
// prediction through pkg/readiness/fromstate) and to an Event on the Pod; when the start is recorded,
// the prediction is checked against what its log showed and the agreement is counted.
package check

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"warmd.io/warmd/pkg/compilekey"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/podwatch"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/state"
	"warmd.io/warmd/pkg/vllm"
)

// Event reasons recorded on a Pod before its vLLM container starts.
const (
	ReasonHit     = "CompileCacheHit"
	ReasonMiss    = "CompileCacheMiss"
	ReasonUnknown = "CompileCacheUnknown"
)

// Options adjust the part; the zero value is what the daemon runs.
type Options struct {
	// Client reaches the API server; nil takes daemon.Deps.Kube.
	Client kube.Interface
	// SKU returns the node's GPU SKU key ("" while unknown).
	SKU func() string
	// Resync re-checks without an event. Default 5s.
	Resync time.Duration
	// Recorder tunes the Event recorder's repeat counting and bounds (pkg/kube/recorder.go).
	Recorder kube.RecorderOptions
}

// Part predicts compile-cache outcomes for the vLLM pods bound to this node.
type Part struct {
	log     *slog.Logger
	store   *state.Store
	metrics *metrics.CompileKey
	client  kube.Interface
	pods    daemon.PodWatch       // this node's one pod watch, shared with pre-warm
	sub     podwatch.Subscription // while watching (mu): its Problem comes first
	opts    Options
	node    string
	path    string // the inputs table, <dataDir>/state/compilekey.json
	kick    chan struct{}
	rc      chan struct{}
	synced  atomic.Bool
	off     atomic.Bool // compileCache.disabled, as the last config says

	mu       sync.Mutex
	table    table             // inputs of recorded starts, by phases.Record.Key
	pending  map[string]*Check // by pod UID
	recent   []Check
	counts   map[string]int // by agreement
	prob     string
	recorder *kube.Recorder
}

var (
	_ daemon.Part           = (*Part)(nil)
	_ daemon.Reconfigurable = (*Part)(nil)
)

// New builds the part, or returns nil (and no error) when there is no API server to see pods
// (readiness.disabled). With compileCache.disabled it exists, reports "disabled" and watches
// nothing; a reload that clears the switch starts it (one that sets it stops it).
func New(deps daemon.Deps, opts Options) (*Part, error) {
	cfg := deps.Config
	if cfg.Readiness.Disabled {
		return nil, nil
	}
	if opts.Client == nil {
		opts.Client = deps.Kube
	}
	if opts.Client == nil {
		return nil, errors.New("compile-cache key check: no API client")
	}
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Second
	}
	if opts.SKU == nil {
		opts.SKU = func() string { return "" }
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var m *metrics.CompileKey
	if deps.Metrics != nil && deps.Metrics.CompileKey != nil {
		m = deps.Metrics.CompileKey
	} else {
		m = metrics.New(prometheus.NewRegistry()).CompileKey
	}
	pods := deps.Pods
	if pods == nil {
		pods = podwatch.New(opts.Client, cfg.NodeName)
	}
	p := &Part{log: log.With("part", "compilekey"), store: deps.Store, metrics: m, client: opts.Client, pods: pods, opts: opts,
		node: cfg.NodeName, path: filepath.Join(cfg.DataDir, "state", tableFile), kick: make(chan struct{}, 1),
		rc: make(chan struct{}, 1), pending: map[string]*Check{}, counts: map[string]int{}}
	p.off.Store(cfg.CompileCache.Disabled)
	t, err := loadTable(p.path)
	if err != nil {
		p.prob = err.Error() // a torn file is rebuilt from the next records
		p.log.Warn("compile-cache inputs", "err", err)
	}
	p.table = t
	return p, nil
}

// setSub records the pod watch subscription while Run holds one (nil after), for Status.
func (p *Part) setSub(s podwatch.Subscription) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sub = s
}

// Name implements daemon.Part.
func (p *Part) Name() string { return "compilekey" }

// Reconfigure implements daemon.Reconfigurable: compileCache.disabled stops or starts the check.
func (p *Part) Reconfigure(cfg *config.NodeConfig) {
	p.off.Store(cfg.CompileCache.Disabled)
	select {
	case p.rc <- struct{}{}:
	default:
	}
}

// Ready implements daemon.Part: nil once this node's pods were listed once, or while disabled.
func (p *Part) Ready() error {
	if p.off.Load() {
		return nil
	}
	if !p.synced.Load() {
		return errors.New("waiting for the first list of this node's pods")
	}
	return nil
}

func (p *Part) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run checks this node's pods until ctx ends, while compileCache.disabled is off (watch), and
// publishes the state "disabled" while it is on.
func (p *Part) Run(ctx context.Context) error {
	for {
		if p.off.Load() {
			p.synced.Store(false)
			if p.store != nil {
				Section.Publish(p.store, Status{Disabled: true})
			}
			select {
			case <-ctx.Done():
				return nil
			case <-p.rc:
			}
			continue
		}
		wctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.watch(wctx) }()
	running:
		for {
			select {
			case <-ctx.Done():
				stop()
				<-done
				return nil
			case err := <-done:
				stop()
				return err
			case <-p.rc:
				if p.off.Load() {
					stop()
					if err := <-done; err != nil {
						return err
					}
					break running
				}
			}
		}
	}
}

// watch watches this node's pods (field selector spec.nodeName) and the recorded starts until ctx ends.
func (p *Part) watch(ctx context.Context) error {
	p.publish() // the section leaves "disabled" at once
	rec := kube.NewRecorder(p.client, corev1.EventSource{Component: "warmd", Host: p.node}, p.opts.Recorder, p.log)
	defer rec.Shutdown()
	p.mu.Lock()
	p.recorder = rec
	p.mu.Unlock()

	sub, err := p.pods.Subscribe()
	if err != nil {
		return fmt.Errorf("compilekey: watch pods of node %s: %w", p.node, err)
	}
	p.setSub(sub)
	defer func() { p.setSub(nil); sub.Close() }()
	tick := time.NewTicker(p.opts.Resync)
	defer tick.Stop()
	var changed <-chan struct{}
	if p.store != nil {
		changed = p.store.Changed()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.kick:
		case <-sub.Changed():
		case <-tick.C:
		case <-changed:
			changed = p.store.Changed()
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
		var recs []phases.Record
		var images prefetch.ImagesStatus
		if p.store != nil {
			snap := p.store.Snapshot()
			st, _ := phases.Section.From(snap)
			recs = st.Records
			images, _ = prefetch.ImagesSection.From(snap)
		}
		if p.reconcile(pods, recs, images) {
			p.publish()
		}
	}
}

// reconcile learns the inputs of new records, resolves the checks they answer, and checks the vLLM
// pods bound here that have not started (images: what warmd pulled, to know a tag's digest). It
// reports whether anything changed.
func (p *Part) reconcile(pods []*corev1.Pod, recs []phases.Record, images prefetch.ImagesStatus) bool {
	byUID := map[string]*corev1.Pod{}
	for _, pod := range pods {
		byUID[string(pod.UID)] = pod
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := p.learn(recs, byUID)
	for _, pod := range pods {
		if p.check(pod, images) {
			changed = true
		}
	}
	for uid, c := range p.pending {
		if _, ok := byUID[uid]; !ok { // gone before its start was recorded: nothing to check it against
			delete(p.pending, uid)
			changed = c != nil || changed
		}
	}
	return changed
}

// learn keeps the inputs of records not seen yet (oldest first) and resolves pending checks.
func (p *Part) learn(recs []phases.Record, byUID map[string]*corev1.Pod) bool {
	changed := false
	for i := len(recs) - 1; i >= 0; i-- { // the section lists newest first
		rec := recs[i]
		if c := p.pending[rec.PodUID]; c != nil && c.Container == rec.Container {
			p.resolve(c, rec.Result.CompileCache)
			p.pending[rec.PodUID] = nil // resolved: not checked again while the pod lives
			changed = true
		}
		if _, seen := p.table.Starts[rec.Key()]; seen {
			continue
		}
		in, ok := recordInputs(rec, byUID[rec.PodUID])
		e := entry{Recorded: rec.Recorded, Graphs: rec.Result.CompileCacheHash != "" &&
			(rec.Result.CompileCache == phases.CacheHit || rec.Result.CompileCache == phases.CacheMiss)}
		if ok {
			e.Inputs = &in
		}
		p.table.put(rec.Key(), e)
		changed = true
		if err := saveTable(p.path, p.table); err != nil {
			p.prob = err.Error()
			p.log.Warn("keep compile-cache inputs", "err", err)
		}
	}
	return changed
}

// recordInputs builds a recorded start's inputs: the pod spec when the pod is still the one that
// started (its status then holds the image digest), else the log's args line.
func recordInputs(rec phases.Record, pod *corev1.Pod) (compilekey.Inputs, bool) {
	r := rec.Result
	if pod != nil {
		if in, ok := compilekey.FromPod(pod, rec.Container); ok {
			in.VLLMVersion, in.GPU, in.CacheHash = r.VLLMVersion, rec.GPUSKU, r.CompileCacheHash
			return in, true
		}
	}
	return compilekey.FromLog(r.VLLMVersion, r.Args, rec.Image, "", rec.GPUSKU, r.CompileCacheHash)
}

// check predicts for one pod whose vLLM container has not started, once per pod (p.mu held).
func (p *Part) check(pod *corev1.Pod, images prefetch.ImagesStatus) bool {
	uid := string(pod.UID)
	if _, done := p.pending[uid]; done || pod.DeletionTimestamp != nil || pod.Spec.NodeName != p.node {
		if c := p.pending[uid]; c != nil && !c.Started && started(pod, c.Container) {
			c.Started = true
			return true
		}
		return false
	}
	ctr := compilekey.VLLMContainer(pod)
	if ctr == "" || started(pod, ctr) {
		p.pending[uid] = nil // not a vLLM pod, or checked too late: never checked
		return false
	}
	want, _ := compilekey.FromPod(pod, ctr)
	want.GPU = p.opts.SKU()
	if want.ImageDigest == "" {
		// A tag: the digest warmd pulled and pinned for it is what the kubelet finds on the node,
		// unless the tag moved and a newer digest is being pulled (then it is not known).
		if im, ok := images.ForRef(want.Image); ok && im.Warm() && im.Pending == "" {
			want.ImageDigest = im.Digest
		}
	}
	cached, _ := p.table.cached()
	v := compilekey.Compare(want, cached)
	c := &Check{Pod: pod.Namespace + "/" + pod.Name, PodUID: uid, Container: ctr, Model: vllm.PodModel(pod),
		Predicted: v.Outcome, Differs: v.Differs, Unknown: v.Unknown, Reason: v.Reason(), Checked: time.Now().UTC()}
	p.pending[uid] = c
	p.metrics.Checks.WithLabelValues(string(v.Outcome)).Inc()
	typ, reason := corev1.EventTypeNormal, ReasonUnknown
	switch v.Outcome {
	case compilekey.Hit:
		reason = ReasonHit
	case compilekey.Miss:
		typ, reason = corev1.EventTypeWarning, ReasonMiss
	}
	if p.recorder != nil {
		p.recorder.Event(kube.Ref("Pod", "v1", pod), typ, reason, fmt.Sprintf("vLLM compile cache predicted %s: %s", v.Outcome, v.Reason()))
	}
	p.log.Info("compile-cache prediction", "pod", c.Pod, "model", c.Model, "predicted", v.Outcome,
		"differs", v.Differs, "unknown", v.Unknown)
	return true
}

// started says whether the container has started at least once.
func started(pod *corev1.Pod, container string) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Running != nil || cs.State.Terminated != nil || cs.RestartCount > 0 ||
				cs.LastTerminationState.Terminated != nil
		}
	}
	return false
}

// resolve records what the start's log showed for a pending check (p.mu held).
func (p *Part) resolve(c *Check, obs phases.CompileCache) {
	c.Observed, c.Agreement = obs, agreement(c.Predicted, obs)
	p.counts[c.Agreement]++
	p.metrics.Outcomes.WithLabelValues(string(c.Predicted), string(obs), c.Agreement).Inc()
	p.recent = slices.Insert(p.recent, 0, *c)
	if len(p.recent) > maxRecent {
		p.recent = p.recent[:maxRecent]
	}
	p.log.Info("compile-cache prediction checked", "pod", c.Pod, "predicted", c.Predicted, "observed", obs,
		"agreement", c.Agreement)
}

// maxRecent bounds Status.Recent.
const maxRecent = 20

// Status returns the part's status section.
func (p *Part) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, n := p.table.cached()
	st := Status{Cached: n, Recent: slices.Clone(p.recent), Agree: p.counts[Agree], Disagree: p.counts[Disagree],
		Undecided: p.counts[Undecided], Problem: p.prob}
	if p.sub != nil {
		if prob := p.sub.Problem(); prob != "" {
			st.Problem = prob
		}
	}
	for _, c := range p.pending {
		if c != nil {
			st.Pending = append(st.Pending, *c)
		}
	}
	slices.SortFunc(st.Pending, func(a, b Check) int { return a.Checked.Compare(b.Checked) })
	return st
}

func (p *Part) publish() {
	if p.store != nil {
		Section.Publish(p.store, p.Status())
	}
}
