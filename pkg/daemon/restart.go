package daemon

import (
	"strings"

	"warmd.io/warmd/pkg/config"
)

// RestartSetting is a NodeConfig setting an applied reload does not reach (yet): the reload goes
// through, the log warns that it waits for a restart, and docs/operations.md lists it (printed
// from RestartNeeded: TestRestartNeededDoc fails when the doc's list differs and, with
// WARMD_UPDATE_DOCS=1, rewrites it).
type RestartSetting struct {
	// Path is the setting's YAML path ("peers.*" for all of a section).
	Path string
	// Why says what is built once, so an operator knows what the restart buys.
	Why string
	// Changed reports whether the edit from start to next is one the running daemon cannot apply.
	Changed func(start, next *config.NodeConfig) bool
}

// RestartNeeded is the one list of settings an applied reload cannot reach: what the one API client
// and the Node-bound watches are built from. Every part's own switch (prewarm, compile caches and their key check, peers) is
// applied by the part itself, which always exists and reports "disabled" as a state.
var RestartNeeded = []RestartSetting{
	{"readiness.disabled", "the API client (and every part that needs it) is built once, at start",
		func(s, n *config.NodeConfig) bool { return s.Readiness.Disabled != n.Readiness.Disabled }},
	{"readiness.kubeconfig", "the API client is built once, at start",
		func(s, n *config.NodeConfig) bool { return s.Readiness.Kubeconfig != n.Readiness.Kubeconfig }},
	{"readiness.resync", "the Node label writer's periodic re-read is set when it starts",
		func(s, n *config.NodeConfig) bool { return s.Readiness.Resync != n.Readiness.Resync }},
	{"nodeName", "the Node watch, the pod watch, the label writer and the peer lookups are bound to one Node at start",
		func(s, n *config.NodeConfig) bool { return s.NodeName != n.NodeName }},
}

// AppliedAtRestart names the changed settings of an applied reload that wait for a restart.
func AppliedAtRestart(start, next *config.NodeConfig) []string {
	var later []string
	for _, r := range RestartNeeded {
		if r.Changed(start, next) {
			later = append(later, r.Path)
		}
	}
	return later
}

// RestartNeededDoc is the Markdown list docs/operations.md prints of RestartNeeded.
func RestartNeededDoc() string {
	var b strings.Builder
	for _, r := range RestartNeeded {
		b.WriteString("- `" + r.Path + "`: " + r.Why + "\n")
	}
	return b.String()
}
