// Package api owns warmd's HTTP endpoints and their client. Two listeners, two audiences:
//   - the unix socket (<dataDir>/warmd.sock, root-only) serves GET /v1/status, the whole node state,
//     for `warmd status` and local tools, and the compile-cache operations CLI commands hand to a
//     running daemon (POST /v1/cache/import, /v1/cache/sync) so only one process writes the data dir;
//   - TCP (default :9400, reachable cluster-wide) serves /metrics, /healthz and /readyz and nothing
//     sensitive: no config, no paths, no credentials.
//
// It does not own rendering for humans (pkg/status, pkg/cli) or the state itself (pkg/state).
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"warmd.io/warmd/pkg/state"
)

// StatusPath is the local API's one resource.
const StatusPath = "/v1/status"

// Server serves both listeners.
type Server struct {
	Store    *state.Store
	Gatherer prometheus.Gatherer
	// Ready reports why the daemon is not ready yet (nil when ready); /readyz answers 503 with it.
	Ready func() error
	// Cache serves the compile-cache operations; nil answers them 503.
	Cache CacheService
	Log   *slog.Logger
}

// LocalHandler serves the unix-socket API.
func (s *Server) LocalHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+StatusPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s.Store.Snapshot()); err != nil {
			s.Log.Warn("write status", "err", err)
		}
	})
	s.cacheRoutes(mux)
	return mux
}

// PublicHandler serves the TCP API.
func (s *Server) PublicHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.Ready != nil {
			if err := s.Ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	return mux
}

// ListenUnix binds the local socket. A stale socket file left by a killed daemon is replaced; a socket
// another live daemon still answers on is an error, so two daemons never share one data dir.
func ListenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("socket %s: another warmd is serving it; stop it or use another dataDir", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return l, nil
}

// Serve serves h on l until ctx ends, then shuts down gracefully within grace. Closing a unix
// listener removes its socket file.
func Serve(ctx context.Context, l net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down %s: %w", l.Addr(), err)
	}
	return nil
}
