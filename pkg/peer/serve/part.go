package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/peer/auth"
)

// PartOptions are what the part needs from the parts whose files it serves, declared here so the
// peer tree imports none of them (the daemon's assembly passes prefetch.PublishedIn and
// cache.OpenKept).
type PartOptions struct {
	// Auth overrides the TokenReview checker built from the config and the daemon's API client.
	Auth Checker
	// Published reports whether the weights part has model at revision verified and published now;
	// nil: no weight file is served.
	Published func(model, revision string) bool
	// OpenBundles opens the dir of compile-cache bundles the cache part verified and kept, by
	// digest, under the data dir; nil: no bundle is served.
	OpenBundles func(dataDir string) (*fsroot.Root, error)
}

// Part runs the peer server on peers.listen for the daemon.
type Part struct {
	log     *slog.Logger
	addr    string
	handler *Handler
	root    *fsroot.Root
	bundles *fsroot.Root

	mu    sync.Mutex
	ready error
	bound string
}

var _ daemon.Part = (*Part)(nil)

// NewPart builds the part, or returns nil (and no error) when peers are not enabled. opts.Published
// reads what is published from the weights part's state, so the part sits after the weights part.
func NewPart(d daemon.Deps, opts PartOptions) (*Part, error) {
	cfg := d.Config
	if !cfg.Peers.Enabled {
		return nil, nil
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Auth == nil {
		r, err := auth.New(d.Kube, auth.Options{Audience: cfg.Peers.Audience, Username: cfg.Peers.PeerUsername()})
		if err != nil {
			return nil, fmt.Errorf("peer server: %w", err)
		}
		opts.Auth = r
	}
	data, err := fsroot.Open(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("peer server: %w", err)
	}
	defer data.Close()
	if err := data.MkdirAll(fsroot.MustPath("weights"), 0o755); err != nil {
		return nil, fmt.Errorf("peer server: weights cache root: %w", err)
	}
	root, err := data.Sub(fsroot.MustPath("weights"))
	if err != nil {
		return nil, fmt.Errorf("peer server: weights cache root: %w", err)
	}
	var bundles *fsroot.Root
	if opts.OpenBundles != nil {
		if bundles, err = opts.OpenBundles(cfg.DataDir); err != nil {
			root.Close()
			return nil, fmt.Errorf("peer server: %w", err)
		}
	}
	pub := opts.Published
	if pub == nil {
		pub = func(string, string) bool { return false }
	}
	var m *metrics.Peers
	if d.Metrics != nil && d.Metrics.Peers != nil {
		m = d.Metrics.Peers
	} else {
		m = metrics.New(prometheus.NewRegistry()).Peers
	}
	h := New(Options{Auth: opts.Auth, Root: root, Bundles: bundles, UploadLimit: cfg.Peers.UploadLimit.Value(),
		ServeSlots: cfg.Peers.ServeSlots, Metrics: m, Log: log.With("part", "peers"), Published: pub})
	return &Part{log: log.With("part", "peers"), addr: cfg.Peers.Listen, handler: h, root: root, bundles: bundles,
		ready: errors.New("peer server not listening yet")}, nil
}

// Name implements daemon.Part.
func (p *Part) Name() string { return "peers" }

// Ready implements daemon.Part: nil once the server listens.
func (p *Part) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}

// Addr is the address the server listens on ("" before it does).
func (p *Part) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bound
}

// Run implements daemon.Part: it serves until ctx ends, then gives responses in flight 5s.
func (p *Part) Run(ctx context.Context) error {
	defer p.root.Close()
	if p.bundles != nil {
		defer p.bundles.Close()
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("peer server: listen on %s (peers.listen): %w", p.addr, err)
	}
	srv := &http.Server{Handler: p.handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	p.mu.Lock()
	p.ready, p.bound = nil, ln.Addr().String()
	p.mu.Unlock()
	p.log.Info("peer server listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("peer server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return nil
}
