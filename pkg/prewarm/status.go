package prewarm

import (
	"slices"
	"time"

	"warmd.io/warmd/pkg/state"
)

// Outcomes of a pre-warm run, as Status and the warmd_prewarm_runs_total event label name them.
const (
	OutcomeRunning   = "running"
	OutcomeFinished  = "finished"  // every file read, or the budget reached
	OutcomeCancelled = "cancelled" // the pod went away (or became ready) first
	OutcomeFailed    = "failed"    // a file could not be listed or read
	OutcomeSkipped   = "skipped"   // no budget left (memory held by other pre-warms or running pods)
)

// States of the part, as Status names them.
const (
	StateOn       = "on"       // watching this node's pods, pre-warming the starting ones
	StateDisabled = "disabled" // prewarm.disabled is set: nothing is watched or read
)

// Section is the prewarm section of the node state.
var Section = state.NewKey[Status]("prewarm")

// Status is the prewarm section of /v1/status (Section).
type Status struct {
	// State is StateDisabled with prewarm.disabled, else StateOn.
	State string `json:"state"`
	// MaxBytes and MemAvailablePercent are the configured caps.
	MaxBytes            int64 `json:"maxBytes"`
	MemAvailablePercent int   `json:"memAvailablePercent"`
	// Active are the pre-warms reading now; Recent the last ones that ended, newest first.
	Active []Run `json:"active,omitempty"`
	Recent []Run `json:"recent,omitempty"`
	// Problem is the last trouble watching pods, "" when none.
	Problem string `json:"problem,omitempty"`
}

// Run is one pre-warm: which pod's start triggered it, for which model, and how far it got.
type Run struct {
	Model    string    `json:"model"`
	Revision string    `json:"revision"`
	Pod      string    `json:"pod"` // namespace/name
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitzero"`
	Budget   int64     `json:"budgetBytes"`
	Bytes    int64     `json:"bytes"`
	Total    int64     `json:"totalBytes"`
	Outcome  string    `json:"outcome"`
	Reason   string    `json:"reason,omitempty"`
}

// maxRecent bounds Recent.
const maxRecent = 10

// Status returns the part's status section.
func (p *Part) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Status{MaxBytes: p.cfg.Prewarm.MaxBytes.Value(), MemAvailablePercent: p.cfg.Prewarm.MemAvailablePercent,
		Recent: slices.Clone(p.recent), State: StateOn}
	if p.sub != nil {
		st.Problem = p.sub.Problem()
	}
	if p.cfg.Prewarm.Disabled {
		st.State = StateDisabled
	}
	for _, a := range p.runs {
		r := a.Run
		r.Bytes = a.bytes.Load()
		st.Active = append(st.Active, r)
	}
	slices.SortFunc(st.Active, func(a, b Run) int { return a.Started.Compare(b.Started) })
	return st
}

func (p *Part) publish() {
	if p.store != nil {
		Section.Publish(p.store, p.Status())
	}
}
