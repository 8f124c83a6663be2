// Package daemon runs warmd's parts together: it loads nothing itself (pkg/cli's run command hands
// it a parsed config) and builds nothing itself (an Assembler, pkg/assemble in `warmd run`, builds
// the parts); it starts every part and the API listeners in one errgroup, feeds config reloads to the parts, answers
// /readyz from the parts' Ready, and stops everything within a bounded grace period when its context
// ends.
//
// It owns the lifecycle, not what the parts do.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon/daemonstatus"
	"warmd.io/warmd/pkg/datadir"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/state"
	"warmd.io/warmd/pkg/version"
)

// Part is one long-running capability (images, weights, caches, phases, readiness). Run blocks until
// ctx ends and returns nil then; an error from Run stops the daemon, so parts handle their own
// transient failures and report them in their status section instead. Ready is nil once the part has
// finished its first pass (what that means is each part's doc); until every part is ready /readyz
// answers 503 with their reasons.
type Part interface {
	Name() string
	Run(ctx context.Context) error
	Ready() error
}

// Reconfigurable parts (and shared pieces) accept a new, validated config while running.
type Reconfigurable interface {
	Reconfigure(cfg *config.NodeConfig)
}

// Deps is what every part is built from: each part's constructor has the shape New(Deps, Options).
// Kube and Node are filled by the assembly (pkg/assemble) before the first part is built.
type Deps struct {
	Config  *config.NodeConfig
	Store   *state.Store
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// Kube is the one API client; nil with readiness.disabled.
	Kube kube.Interface
	// Node is this node's view of its Node object (pkg/nodewatch; nodewatch.Off without an API
	// server).
	Node NodeView
	// Pods is this node's one watch of the pods bound to it, shared by the parts that read pods
	// (pkg/podwatch; nil without an API server).
	Pods PodWatch
}

// Assembly is what an Assembler built: the parts, in data-flow order (they start in it), and the
// shared pieces that are no part but follow config reloads too (the model naming several parts read).
type Assembly struct {
	Parts  []Part
	Shared []Reconfigurable
}

// Assembler builds the parts from the daemon's dependencies (pkg/assemble.Parts in `warmd run`).
type Assembler func(Deps) (Assembly, error)

// Options configure a daemon.
type Options struct {
	ConfigPath string
	// ConfigData is the content Config was parsed from (so the watcher knows what is loaded).
	ConfigData []byte
	Config     *config.NodeConfig
	// Grace bounds shutdown after the context ends.
	Grace time.Duration
	// Assemble builds the parts to run.
	Assemble Assembler
	// Poll is the config-file poll interval backing up fsnotify.
	Poll time.Duration
}

// Run runs the daemon until ctx ends. It returns nil after a clean shutdown.
func Run(ctx context.Context, opts Options, store *state.Store, m *metrics.Metrics, gatherer prometheus.Gatherer, log *slog.Logger) error {
	cfg := opts.Config
	// One writer per data dir: a second daemon (another socket, another pod of a rolling update) or a
	// CLI writer must not interleave with this one's staging, journals and bundle records.
	lock, err := datadir.Acquire(cfg.DataDir, datadir.Holder{Command: "warmd run", Socket: cfg.API.Socket})
	if err != nil {
		return err
	}
	defer lock.Release()
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "state"), 0o755); err != nil {
		return fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	if opts.Grace <= 0 {
		opts.Grace = 20 * time.Second
	}
	m.Daemon.BuildInfo.WithLabelValues(version.Version).Set(1)

	asm, err := opts.Assemble(Deps{Config: cfg, Store: store, Metrics: m, Log: log})
	if err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	parts := asm.Parts
	ds := daemonstatus.Status{
		Version: version.Version, NodeName: cfg.NodeName, DataDir: cfg.DataDir, ConfigFile: opts.ConfigPath,
		Started: time.Now().UTC(), PID: os.Getpid(), Listen: cfg.API.Listen, Socket: cfg.API.Socket,
	}
	for _, p := range parts {
		ds.Parts = append(ds.Parts, p.Name())
	}
	var dsMu sync.Mutex
	publishDaemon := func(mut func(*daemonstatus.Status)) {
		dsMu.Lock()
		defer dsMu.Unlock()
		mut(&ds)
		cp := ds
		daemonstatus.Section.Publish(store, cp)
	}
	publishDaemon(func(*daemonstatus.Status) {})
	daemonstatus.ConfigSection.Publish(store, daemonstatus.Summarize(cfg))

	local, err := api.ListenUnix(cfg.API.Socket)
	if err != nil {
		return err
	}
	public, err := net.Listen("tcp", cfg.API.Listen)
	if err != nil {
		local.Close()
		return fmt.Errorf("listen on %s: %w (set api.listen to a free address)", cfg.API.Listen, err)
	}
	ready := newReadiness(parts)
	srv := &api.Server{Store: store, Gatherer: gatherer, Log: log, Ready: ready.check}
	for _, p := range parts {
		if c, ok := p.(api.CacheService); ok {
			srv.Cache = c // CLI cache writers go through the daemon while it holds the data dir
		}
	}
	log.Info("warmd started", "version", version.Version, "node", cfg.NodeName, "socket", cfg.API.Socket,
		"listen", public.Addr().String(), "parts", ds.Parts)

	// Parts run under their own context so the API keeps answering while they stop.
	partsCtx, stopParts := context.WithCancel(context.WithoutCancel(ctx))
	defer stopParts()
	g, gctx := errgroup.WithContext(partsCtx)
	for _, p := range parts {
		g.Go(func() error {
			err := p.Run(gctx)
			ready.stopped(p)
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("%s: %w", p.Name(), err)
			}
			if gctx.Err() == nil {
				log.Error("a part stopped on its own; /readyz reports it", "part", p.Name())
			}
			return nil
		})
	}
	g.Go(func() error { ready.logChanges(gctx, log); return nil })
	g.Go(func() error { trimHeap(gctx, trimEvery, trimAbove); return nil })
	g.Go(func() error {
		return config.Watch(gctx, opts.ConfigPath, opts.ConfigData, opts.Poll, func(next *config.NodeConfig, err error) {
			if err == nil {
				err = FixedAcrossReloads(cfg, next)
			}
			r := &daemonstatus.Reload{Time: time.Now().UTC(), Applied: err == nil}
			if err != nil {
				r.Error = state.Reason(err)
				m.Daemon.ConfigReloads.WithLabelValues("rejected").Inc()
				log.Error("config change rejected; the previous config keeps running", "file", opts.ConfigPath, "err", err)
			} else {
				m.Daemon.ConfigReloads.WithLabelValues("applied").Inc()
				log.Info("config reloaded", "file", opts.ConfigPath, "config", next)
				if later := AppliedAtRestart(cfg, next); len(later) > 0 {
					log.Warn("some changed settings apply only when warmd restarts", "settings", later)
				}
				for _, sh := range asm.Shared {
					sh.Reconfigure(next)
				}
				for _, p := range parts {
					if rc, ok := p.(Reconfigurable); ok {
						rc.Reconfigure(next)
					}
				}
				daemonstatus.ConfigSection.Publish(store, daemonstatus.Summarize(next))
			}
			publishDaemon(func(d *daemonstatus.Status) { d.Reloads++; d.LastReload = r })
		})
	})
	srvErr := make(chan error, 2)
	apiCtx, stopAPI := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAPI()
	go func() { srvErr <- api.Serve(apiCtx, local, srv.LocalHandler(), opts.Grace) }()
	go func() { srvErr <- api.Serve(apiCtx, public, srv.PublicHandler(), opts.Grace) }()
	partsDone := make(chan error, 1)
	go func() { partsDone <- g.Wait() }()

	var runErr error
	pendingSrv := 2
	select {
	case <-ctx.Done():
		log.Info("stopping", "grace", opts.Grace.String())
	case runErr = <-partsDone:
		partsDone <- runErr
		log.Error("a part failed; stopping", "err", runErr)
	case runErr = <-srvErr:
		pendingSrv--
		log.Error("API server failed; stopping", "err", runErr)
	}
	ready.stop()
	publishDaemon(func(d *daemonstatus.Status) { d.Stopping = true })
	stopParts()
	select {
	case err := <-partsDone:
		if runErr == nil {
			runErr = err
		}
	case <-time.After(opts.Grace):
		runErr = errors.Join(runErr, fmt.Errorf("parts did not stop within the %s grace period", opts.Grace))
	}
	stopAPI()
	for range pendingSrv {
		if err := <-srvErr; err != nil && runErr == nil {
			runErr = err
		}
	}
	if runErr == nil {
		log.Info("stopped cleanly")
	}
	return runErr
}

// FixedAcrossReloads refuses a reload that moves what the daemon holds open for its life: the data
// dir (and its lock) and the API endpoints. Applying such a change half-way would leave the lock on one
// dir while parts write another.
func FixedAcrossReloads(cur, next *config.NodeConfig) error {
	var changed []string
	if next.DataDir != cur.DataDir {
		changed = append(changed, "dataDir")
	}
	if next.API.Socket != cur.API.Socket {
		changed = append(changed, "api.socket")
	}
	if next.API.Listen != cur.API.Listen {
		changed = append(changed, "api.listen")
	}
	if len(changed) == 0 {
		return nil
	}
	return fmt.Errorf("%s cannot change while warmd runs: restart warmd to apply it", strings.Join(changed, ", "))
}
