package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"syscall"
)

// Paths of the compile-cache operations on the local socket. They exist so that the CLI never writes
// a data dir the daemon holds: `warmd cache import|pull|push` hand their work to the daemon, which
// records it in the one manager that also captures (a bundle imported beside the daemon would be
// captured again as the node's own and uploaded a second time).
const (
	CacheImportPath = "/v1/cache/import" // POST, body: the bundle; ?component=
	CacheSyncPath   = "/v1/cache/sync"   // POST ?op=pull|push
)

// CacheService is the compile-cache part as the local API sees it.
type CacheService interface {
	// ImportBundle imports one bundle streamed in r into the tree of component.
	ImportBundle(ctx context.Context, r io.Reader, component string) (CacheImport, error)
	// SyncCache runs one restore ("pull") or capture and upload ("push") now.
	SyncCache(ctx context.Context, op string) (CacheSync, error)
}

// Errors a CacheService returns to pick the HTTP status; anything else is a 500.
var (
	// ErrCacheNotReady: compile caches are off, or waiting for the GPU SKU (503).
	ErrCacheNotReady = errors.New("compile caches are not running")
	// ErrCacheRefused: the bundle or the request was refused (422): corrupt, unsafe, too large,
	// another SKU's, an unknown component or op.
	ErrCacheRefused = errors.New("refused")
)

// CacheImport is what an import did.
type CacheImport struct {
	SHA256    string   `json:"sha256"`
	Component string   `json:"component"`
	Entries   int      `json:"entries"`
	Written   int      `json:"written"`
	Existing  int      `json:"existing"`
	Conflicts []string `json:"conflicts,omitempty"`
}

// CacheSync is what a pull or push did.
type CacheSync struct {
	Op       string   `json:"op"`
	Restored int      `json:"restored,omitempty"`
	Remote   int      `json:"remote,omitempty"`
	Refused  []string `json:"refused,omitempty"`
	Captured int      `json:"captured,omitempty"`
	Pending  int      `json:"pending,omitempty"`
	Uploaded int      `json:"uploaded,omitempty"`
	Seconds  float64  `json:"seconds"`
}

// apiError is the body of a failed request.
type apiError struct {
	Error string `json:"error"`
}

func (s *Server) cacheRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+CacheImportPath, func(w http.ResponseWriter, r *http.Request) {
		if s.Cache == nil {
			writeError(w, ErrCacheNotReady)
			return
		}
		res, err := s.Cache.ImportBundle(r.Context(), r.Body, r.URL.Query().Get("component"))
		writeResult(w, res, err)
	})
	mux.HandleFunc("POST "+CacheSyncPath, func(w http.ResponseWriter, r *http.Request) {
		if s.Cache == nil {
			writeError(w, ErrCacheNotReady)
			return
		}
		res, err := s.Cache.SyncCache(r.Context(), r.URL.Query().Get("op"))
		writeResult(w, res, err)
	})
}

func writeResult(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrCacheNotReady):
		code = http.StatusServiceUnavailable
	case errors.Is(err, ErrCacheRefused):
		code = http.StatusUnprocessableEntity
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(apiError{Error: err.Error()})
}

// CacheImport streams one bundle to the daemon and returns what it imported. It has no timeout of its
// own: ctx bounds it (a large bundle takes as long as it takes; a signal ends it).
func (c *Client) CacheImport(ctx context.Context, bundle io.Reader, component string) (*CacheImport, error) {
	var res CacheImport
	q := url.Values{"component": {component}}
	if err := c.post(ctx, CacheImportPath+"?"+q.Encode(), bundle, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// CacheSync asks the daemon to pull (restore) or push (capture and upload) now.
func (c *Client) CacheSync(ctx context.Context, op string) (*CacheSync, error) {
	var res CacheSync
	if err := c.post(ctx, CacheSyncPath+"?"+url.Values{"op": {op}}.Encode(), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func (c *Client) post(ctx context.Context, path string, body io.Reader, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://warmd"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	long := *c.http
	long.Timeout = 0 // ctx bounds it
	resp, err := long.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w (no daemon on %s)", ErrNotRunning, c.Socket)
		}
		return fmt.Errorf("%s on %s: %w", path, c.Socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e apiError
		if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e) != nil || e.Error == "" {
			e.Error = resp.Status
		}
		err := &statusError{msg: e.Error}
		switch resp.StatusCode {
		case http.StatusServiceUnavailable:
			err.is = ErrCacheNotReady
		case http.StatusUnprocessableEntity:
			err.is = ErrCacheRefused
		}
		return fmt.Errorf("the daemon on %s: %w", c.Socket, err)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(v); err != nil {
		return fmt.Errorf("decode the daemon's answer: %w", err)
	}
	return nil
}

// statusError is a daemon's error message with the sentinel its HTTP status stands for.
type statusError struct {
	msg string
	is  error
}

func (e *statusError) Error() string        { return e.msg }
func (e *statusError) Is(target error) bool { return e.is != nil && target == e.is }
