// Package daemonstatus is the daemon's own section of the node state: which process runs, with which
// config, and how its reloads went. It lives apart from pkg/daemon (the lifecycle: parts, reload, API
// servers) so readers of the section, such as the status renderer, need not import the lifecycle.
package daemonstatus

import (
	"time"

	"warmd.io/warmd/pkg/state"
)

// Section is the daemon section of the node state, published by pkg/daemon.
var Section = state.NewKey[Status]("daemon")

// Status is the daemon's own status section.
type Status struct {
	Version    string    `json:"version"`
	NodeName   string    `json:"nodeName"`
	DataDir    string    `json:"dataDir"`
	ConfigFile string    `json:"configFile"`
	Started    time.Time `json:"started"`
	PID        int       `json:"pid"`
	Parts      []string  `json:"parts"`
	Reloads    int       `json:"reloads"`
	LastReload *Reload   `json:"lastReload,omitempty"`
	Listen     string    `json:"listen"`
	Socket     string    `json:"socket"`
	Stopping   bool      `json:"stopping,omitempty"`
	Problems   []string  `json:"problems,omitempty"`
}

// Reload records the outcome of the last config reload.
type Reload struct {
	Time    time.Time `json:"time"`
	Applied bool      `json:"applied"`
	Error   string    `json:"error,omitempty"`
}
