package check

import (
	"time"

	"warmd.io/warmd/pkg/compilekey"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/state"
)

// Section is the compileKey section of the node state: readiness reads it for the prediction, the
// status command renders it.
var Section = state.NewKey[Status]("compileKey")

// Status is the compileKey section of /v1/status.
type Status struct {
	// Disabled is set while compileCache.disabled is: no pod is watched and nothing is predicted.
	Disabled bool `json:"disabled,omitempty"`
	// Cached counts the recorded starts whose inputs are known and whose graphs the node holds: what
	// a pod is compared with.
	Cached int `json:"cached"`
	// Pending are the checks of vLLM pods bound here whose container has not started yet.
	Pending []Check `json:"pending,omitempty"`
	// Recent are the checks a recorded start resolved, newest first.
	Recent []Check `json:"recent,omitempty"`
	// Agree, Disagree and Undecided count resolved checks: the prediction matched the log's hit or
	// miss, did not, or one side said neither (unknown prediction, a start without a verdict).
	Agree     int `json:"agree"`
	Disagree  int `json:"disagree"`
	Undecided int `json:"undecided"`
	// Problem is the last trouble watching pods or keeping the inputs, "" when none.
	Problem string `json:"problem,omitempty"`
}

// Check is one pod's prediction and, once its start is recorded, the outcome.
type Check struct {
	Pod       string             `json:"pod"` // namespace/name
	PodUID    string             `json:"podUID"`
	Container string             `json:"container"`
	Model     string             `json:"model,omitempty"`
	Predicted compilekey.Outcome `json:"predicted"`
	// Differs and Unknown name inputs (never their values).
	Differs []string  `json:"differs,omitempty"`
	Unknown []string  `json:"unknown,omitempty"`
	Reason  string    `json:"reason"`
	Checked time.Time `json:"checked"`
	// Started is set once the container started (the check waits for its log then).
	Started bool `json:"started,omitempty"`
	// Observed is the compile-cache outcome the start's log showed ("" while pending).
	Observed phases.CompileCache `json:"observed,omitempty"`
	// Agreement is agree, disagree or undecided once observed.
	Agreement string `json:"agreement,omitempty"`
}

// Agreement values of a resolved check.
const (
	Agree     = "agree"
	Disagree  = "disagree"
	Undecided = "undecided"
)

// agreement compares a prediction with what the log said.
func agreement(pred compilekey.Outcome, obs phases.CompileCache) string {
	if pred == compilekey.Unknown || (obs != phases.CacheHit && obs != phases.CacheMiss) {
		return Undecided
	}
	if string(pred) == string(obs) {
		return Agree
	}
	return Disagree
}

// ForModel returns the newest check of a model's pod that has not started, with a hit or miss
// prediction: what readiness's prediction for the model takes as its compile-cache outcome.
func (s Status) ForModel(model string) (Check, bool) {
	var best Check
	found := false
	for _, c := range s.Pending {
		if c.Model == model && !c.Started && c.Predicted != compilekey.Unknown && (!found || c.Checked.After(best.Checked)) {
			best, found = c, true
		}
	}
	return best, found
}
