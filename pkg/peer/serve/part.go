package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/metrics"
	authpkg "warmd.io/warmd/pkg/peer/auth"
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
	// Staged returns the verified files of a download in flight (prefetch.StagedIn); nil: only
	// published revisions are served.
	Staged func(model, revision string) map[string]string
	// Pieces returns the partly verified files of a download in flight (prefetch.PiecesIn, adapted);
	// nil: none is served.
	Pieces func(model, revision string) map[string]Pieces
	// OpenBundles opens the dir of compile-cache bundles the cache part verified and kept, by
	// digest, under the data dir; nil: no bundle is served.
	OpenBundles func(dataDir string) (*fsroot.Root, error)
	// ImageLayers opens the layer blobs of the images the images part pulled and pinned; nil: no
	// layer is served.
	ImageLayers LayerOpener
}

// Part runs the peer server on peers.listen for the daemon. It always exists: with peers.enabled
// off it serves nothing and reports so, and a reload that turns peers on, off, or changes any
// peers.* setting takes effect at once (the server is rebuilt with the new settings; downloads in
// flight are cut and resume from another peer or the origin).
type Part struct {
	deps daemon.Deps
	opts PartOptions
	log  *slog.Logger
	m    *metrics.Peers
	rc   chan struct{}

	mu    sync.Mutex
	cfg   *config.NodeConfig
	ready error
	bound string
	state string
}

var (
	_ daemon.Part           = (*Part)(nil)
	_ daemon.Reconfigurable = (*Part)(nil)
)

// The states the part reports (State, and the log line of each change).
const (
	StateStarting = "starting" // Run has not looked at the settings yet
	StateDisabled = "disabled" // peers.enabled is off: nothing listens
	StateServing  = "serving"  // listening on peers.listen
	StateFailed   = "failed"   // enabled, but the server could not start (listen, data dir); see Ready
)

// NewPart builds the part. opts.Published reads what is published from the weights part's state, so
// the part sits after the weights part.
func NewPart(d daemon.Deps, opts PartOptions) (*Part, error) {
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var m *metrics.Peers
	if d.Metrics != nil && d.Metrics.Peers != nil {
		m = d.Metrics.Peers
	} else {
		m = metrics.New(prometheus.NewRegistry()).Peers // counted nowhere
	}
	return &Part{deps: d, opts: opts, log: log.With("part", "peers"), m: m, rc: make(chan struct{}, 1),
		cfg: d.Config, ready: errors.New("peer server not started yet"), state: StateStarting}, nil
}

// server is one running configuration of the peer server.
type server struct {
	handler       *Handler
	root, bundles *fsroot.Root
}

func (s *server) close() {
	s.root.Close()
	if s.bundles != nil {
		s.bundles.Close()
	}
}

// build opens what cfg's server serves and checks its tokens with.
func (p *Part) build(cfg *config.NodeConfig) (*server, error) {
	auth := p.opts.Auth
	if auth == nil {
		r, err := authpkg.New(p.deps.Kube, authpkg.Options{Audience: cfg.Peers.Audience, Username: cfg.Peers.PeerUsername()})
		if err != nil {
			return nil, fmt.Errorf("peer server: %w", err)
		}
		auth = r
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
	s := &server{root: root}
	if p.opts.OpenBundles != nil {
		if s.bundles, err = p.opts.OpenBundles(cfg.DataDir); err != nil {
			root.Close()
			return nil, fmt.Errorf("peer server: %w", err)
		}
	}
	pub := p.opts.Published
	if pub == nil {
		pub = func(string, string) bool { return false }
	}
	s.handler = New(Options{Auth: auth, Root: root, Bundles: s.bundles, ImageLayers: p.opts.ImageLayers, UploadLimit: cfg.Peers.UploadLimit.Value(),
		ServeSlots: cfg.Peers.ServeSlots, WriteStall: cfg.Peers.StallTimeout.Duration, Metrics: p.m, Log: p.log, Published: pub, Staged: p.opts.Staged, Pieces: p.opts.Pieces})
	return s, nil
}

// Name implements daemon.Part.
func (p *Part) Name() string { return "peers" }

// Ready implements daemon.Part: nil once the server listens, or while peers are disabled.
func (p *Part) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}

// State is what the part does now (StateStarting, StateDisabled, StateServing, StateFailed).
func (p *Part) State() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Addr is the address the server listens on ("" when it does not).
func (p *Part) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bound
}

// Reconfigure implements daemon.Reconfigurable: a change of any peers.* setting (or the data dir)
// rebuilds the server with it; turning peers.enabled off stops it.
func (p *Part) Reconfigure(cfg *config.NodeConfig) {
	p.mu.Lock()
	p.cfg = cfg
	p.mu.Unlock()
	select {
	case p.rc <- struct{}{}:
	default:
	}
}

func (p *Part) current() *config.NodeConfig {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

func (p *Part) set(state, bound string, ready error) {
	p.mu.Lock()
	changed := p.state != state || p.bound != bound
	p.state, p.bound, p.ready = state, bound, ready
	p.mu.Unlock()
	if changed {
		switch state {
		case StateFailed:
			p.log.Error("peer server not serving", "err", ready)
		case StateServing:
			p.log.Info("peer server listening", "addr", bound)
		case StateDisabled:
			p.log.Info("peer server off (peers.enabled is false)")
		}
	}
}

// Settings is what a running server is built from (as JSON, so quantities compare by value): a
// reload that changes it rebuilds the server. Exported for the test that walks every NodeConfig
// setting (pkg/assemble).
func Settings(cfg *config.NodeConfig) string {
	b, _ := json.Marshal([]any{cfg.Peers, cfg.DataDir})
	return string(b)
}

// Run implements daemon.Part: it serves with the current settings until ctx ends, rebuilding the
// server when a reload changes them. A server that cannot start (the port taken, the data dir
// unusable) fails the part's readiness with the reason until a reload fixes it; the daemon goes on.
func (p *Part) Run(ctx context.Context) error {
	for {
		cfg := p.current()
		running := Settings(cfg)
		if !cfg.Peers.Enabled {
			p.set(StateDisabled, "", nil)
		} else if err := p.serve(ctx, cfg, running); err != nil {
			p.set(StateFailed, "", err)
		}
		if ctx.Err() != nil {
			return nil
		}
		// Wait for a reload that changes the settings (serve returns on one itself).
		for Settings(p.current()) == running {
			select {
			case <-ctx.Done():
				return nil
			case <-p.rc:
			}
		}
	}
}

// serve runs cfg's server until ctx ends or a reload changes the settings from running; then it
// gives responses in flight 5 s.
func (p *Part) serve(ctx context.Context, cfg *config.NodeConfig, running string) error {
	s, err := p.build(cfg)
	if err != nil {
		return err
	}
	defer s.close()
	ln, err := net.Listen("tcp", cfg.Peers.Listen)
	if err != nil {
		return fmt.Errorf("peer server: listen on %s (peers.listen): %w", cfg.Peers.Listen, err)
	}
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	p.set(StateServing, ln.Addr().String(), nil)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
		p.set(StateStarting, "", errors.New("peer server restarting"))
	}()
	for {
		select {
		case err := <-errc:
			return fmt.Errorf("peer server: %w", err)
		case <-ctx.Done():
			return nil
		case <-p.rc:
			if Settings(p.current()) != running {
				p.log.Info("peer settings changed: rebuilding the peer server")
				return nil
			}
		}
	}
}
