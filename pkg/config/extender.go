package config

import (
	"fmt"
	"net"
	"time"
)

// Extender is how `warmd extender` serves kube-scheduler. It is set by the command's flags (the
// extender Deployment mounts no NodeConfig; cobra refuses an unknown flag, which is what strict
// decoding is for a file) and checked here like every NodeConfig field: Validate names every problem
// at once, each by its flag, with the rule and the fix. docs/security.md ("The extender endpoint")
// explains each bound. TLS and client-certificate authentication are not configured here yet.
type Extender struct {
	// Listen is the scheduler API's address (/filter, /prioritize). Default :8888. host:port.
	Listen string
	// MaxBodyBytes bounds one request body; a larger one is refused with 413. Default 6 MiB
	// (pkg/extender.DefaultMaxBodyBytes: 10,000 Node names and the largest Pod). Range: 64Ki..1Gi.
	MaxBodyBytes int64
	// MaxInFlight bounds the scheduler requests served at once; one more is refused with 503.
	// Default 8. Range: 1..256.
	MaxInFlight int
	// MaxNodes bounds the candidate Nodes of one request; more are refused with 413. Default 10000.
	// Range: 1..100000.
	MaxNodes int
	// RequestTimeout is the longest one request may take to arrive whole (the server's read timeout;
	// its write timeout is twice it, its header timeout at most 5s). Default 10s. Range: 1s..5m.
	RequestTimeout time.Duration
}

// Defaults of Extender.
const (
	DefaultExtenderListen       = ":8888"
	DefaultExtenderMaxBodyBytes = 6 << 20
	DefaultExtenderMaxInFlight  = 8
	DefaultExtenderMaxNodes     = 10_000
	DefaultExtenderTimeout      = 10 * time.Second
)

// Default fills every unset field.
func (e *Extender) Default() {
	setStr(&e.Listen, DefaultExtenderListen)
	if e.MaxBodyBytes == 0 {
		e.MaxBodyBytes = DefaultExtenderMaxBodyBytes
	}
	setInt(&e.MaxInFlight, DefaultExtenderMaxInFlight)
	setInt(&e.MaxNodes, DefaultExtenderMaxNodes)
	if e.RequestTimeout == 0 {
		e.RequestTimeout = DefaultExtenderTimeout
	}
}

// Validate checks the defaulted flags and returns a *ValidationError naming every problem, or nil.
func (e *Extender) Validate() error {
	var p problems
	if _, port, err := net.SplitHostPort(e.Listen); err != nil || !validPort(port) || hasControl(e.Listen) {
		p.add("--listen", fmt.Sprintf("%s is not host:port", quote(e.Listen)), "for example :8888 or 127.0.0.1:8888")
	}
	if e.MaxBodyBytes < 64<<10 || e.MaxBodyBytes > 1<<30 {
		p.add("--max-body-bytes", fmt.Sprintf("%d is outside 65536..1073741824 (64Ki..1Gi)", e.MaxBodyBytes),
			"6 MiB holds 10,000 Node names and the largest Pod; full Node objects need about 20 KiB each")
	}
	if e.MaxInFlight < 1 || e.MaxInFlight > 256 {
		p.add("--max-in-flight", fmt.Sprintf("%d is outside 1..256", e.MaxInFlight),
			"each scheduler sends one request at a time; each in flight may hold about 3× --max-body-bytes")
	}
	if e.MaxNodes < 1 || e.MaxNodes > 100_000 {
		p.add("--max-nodes", fmt.Sprintf("%d is outside 1..100000", e.MaxNodes), "Kubernetes supports 5,000 Nodes; the default is twice that")
	}
	if e.RequestTimeout < time.Second || e.RequestTimeout > 5*time.Minute {
		p.add("--request-timeout", fmt.Sprintf("%s is outside 1s..5m", e.RequestTimeout), "the shipped scheduler configs give the extender 2s (httpTimeout)")
	}
	if len(p) > 0 {
		return &ValidationError{Problems: p}
	}
	return nil
}
