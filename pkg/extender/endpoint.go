package extender

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Endpoint is one of the extender's HTTP listeners: the scheduler API (TLS when configured), and
// optionally a plain one for /metrics and the probes.
type Endpoint struct {
	// Flag names the flag that set the address, for logs and errors.
	Flag     string
	Listener net.Listener
	Server   *http.Server
	// TLS serves with Server.TLSConfig (see ServerTLS).
	TLS bool
}

// NewServer bounds every connection in time: headers in 5s (or timeout if shorter), the whole
// request in timeout, the answer in twice it, an idle keep-alive in 90s, headers at most 64 KiB.
func NewServer(h http.Handler, timeout time.Duration) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: min(5*time.Second, timeout),
		ReadTimeout: timeout, WriteTimeout: 2 * timeout, IdleTimeout: 90 * time.Second, MaxHeaderBytes: 64 << 10}
}

// Serve serves until Server is shut down (then it returns nil).
func (e *Endpoint) Serve() error {
	var err error
	if e.TLS {
		err = e.Server.ServeTLS(e.Listener, "", "")
	} else {
		err = e.Server.Serve(e.Listener)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serve %s %s: %w", e.Flag, e.Listener.Addr(), err)
}
