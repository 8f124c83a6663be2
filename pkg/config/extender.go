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
// explains each bound, TLS and client-certificate authentication among them.
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
	// TLSCertFile and TLSKeyFile are the server's PEM certificate and key (a mounted Secret's tls.crt
	// and tls.key); with them the scheduler API is served over TLS and the files are read again when
	// they change. Both or neither.
	TLSCertFile, TLSKeyFile string
	// ClientCAFile is the PEM bundle of the CA that signs the scheduler's client certificate; with it
	// a connection without a certificate it signed is refused in the handshake. Needs TLSCertFile and
	// MetricsListen (the kubelet's probes and Prometheus carry no client certificate).
	ClientCAFile string
	// MetricsListen, when set, is a second, plain-HTTP address for /metrics, /healthz and /readyz, so
	// that Listen serves only the scheduler. host:port; empty: everything on Listen.
	MetricsListen string
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
	if (e.TLSCertFile == "") != (e.TLSKeyFile == "") {
		p.add("--tls-cert-file/--tls-key-file", "only one of the two is set", "give both (a kubernetes.io/tls Secret's tls.crt and tls.key) or neither")
	}
	if e.ClientCAFile != "" && e.TLSCertFile == "" {
		p.add("--client-ca-file", "client certificates need TLS", "set --tls-cert-file and --tls-key-file too")
	}
	if e.ClientCAFile != "" && e.MetricsListen == "" {
		p.add("--client-ca-file", "the kubelet's probes and Prometheus carry no client certificate", "set --metrics-listen (for example :8889) for /metrics, /healthz and /readyz")
	}
	if e.MetricsListen != "" {
		if _, port, err := net.SplitHostPort(e.MetricsListen); err != nil || !validPort(port) || hasControl(e.MetricsListen) {
			p.add("--metrics-listen", fmt.Sprintf("%s is not host:port", quote(e.MetricsListen)), "for example :8889")
		} else if e.MetricsListen == e.Listen {
			p.add("--metrics-listen", "is the same address as --listen", "pick another port, or leave it empty to serve everything on --listen")
		}
	}
	if len(p) > 0 {
		return &ValidationError{Problems: p}
	}
	return nil
}
