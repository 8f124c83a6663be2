package readiness

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/nodewatch"
	"warmd.io/warmd/pkg/state"
)

// LocalPart evaluates warm state when readiness.disabled is set (no API server: demos, nodes outside
// Kubernetes, a cluster where another agent owns the Node). It runs the same rules as Part and
// publishes the same status section, so `warmd status`, `warmd status --check` and the metrics work
// alike, but it never talks to an API server. Selectors are evaluated against no labels: only models
// without a nodeSelector are wanted.
type LocalPart struct {
	store   *state.Store
	log     *slog.Logger
	input   InputFunc
	metrics *metrics.Readiness

	mu        sync.Mutex
	cfg       *config.NodeConfig
	everWarm  bool
	evaluated bool // the first evaluation is published (Ready)
	rc        chan struct{}
}

var (
	_ daemon.Part           = (*LocalPart)(nil)
	_ daemon.Reconfigurable = (*LocalPart)(nil)
)

// NewLocalPart returns the API-less readiness part.
func NewLocalPart(d daemon.Deps, input InputFunc) *LocalPart {
	p := &LocalPart{store: d.Store, log: d.Log, input: input, cfg: d.Config, rc: make(chan struct{}, 1)}
	if d.Metrics != nil {
		p.metrics = d.Metrics.Readiness
	}
	return p
}

// Name implements daemon.Part.
func (p *LocalPart) Name() string { return "readiness" }

// Ready implements daemon.Part: nil once the first evaluation is published.
func (p *LocalPart) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.evaluated {
		return errors.New("first evaluation of warm state not done")
	}
	return nil
}

// Reconfigure implements daemon.Reconfigurable.
func (p *LocalPart) Reconfigure(cfg *config.NodeConfig) {
	p.mu.Lock()
	p.cfg = cfg
	p.mu.Unlock()
	select {
	case p.rc <- struct{}{}:
	default:
	}
}

// Run re-evaluates after every change of the state store and publishes only when the result changed.
func (p *LocalPart) Run(ctx context.Context) error {
	var last *Status
	for {
		ch := p.store.Changed()
		p.mu.Lock()
		cfg := p.cfg
		p.mu.Unlock()
		wants := func(m config.Model) bool {
			ok, err := nodewatch.ModelWanted(m, nil)
			return ok && err == nil
		}
		in := p.input(p.store.Snapshot(), cfg, wants)
		d := Build(in, p.everWarm, 0)
		p.everWarm = d.EverWarm
		st := Status{Node: cfg.NodeName, Warm: d.Warm, Labels: d.Labels, Condition: d.Condition,
			Models: make(map[string]ModelState, len(d.Models)), Predictions: in.Predictions.Detail}
		for _, m := range d.Models {
			st.Models[m.Name] = m
		}
		if last == nil || !reflect.DeepEqual(*last, st) {
			if p.metrics != nil {
				p.metrics.PredictedReady.Reset()
				for model, s := range in.Predictions.Seconds {
					p.metrics.PredictedReady.WithLabelValues(model).Set(s)
				}
				states := make(map[string]string, len(d.Models))
				for _, m := range d.Models {
					states[m.Name] = string(m.State)
				}
				p.metrics.Observe(d.Warm, states)
			}
			Section.Publish(p.store, st)
			last = &st
		}
		p.mu.Lock()
		p.evaluated = true
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		case <-p.rc:
		}
		select { // parts publish in bursts; let one evaluation cover them
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}
