package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"
)

// ErrNotRunning means nothing answers on the socket: the daemon is not running (or runs with another
// data dir).
var ErrNotRunning = errors.New("warmd is not running")

// RawStatus is /v1/status with each section left as JSON, so a client decodes the sections it knows
// into their types (state.Key.Decode with the producer's key) and shows the rest as they are.
type RawStatus struct {
	Version  uint64                     `json:"version"`
	Updated  time.Time                  `json:"updated"`
	Sections map[string]json.RawMessage `json:"sections"`
}

// Client talks to the local API over the unix socket.
type Client struct {
	Socket string
	http   *http.Client
}

// NewClient returns a client for the daemon serving socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{Socket: socket, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// Status fetches /v1/status. When nothing listens it returns an error wrapping ErrNotRunning.
func (c *Client) Status(ctx context.Context) (*RawStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://warmd"+StatusPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w (no daemon on %s): start it with `warmd run --config FILE`, or pass --socket/--data-dir", ErrNotRunning, c.Socket)
		}
		return nil, fmt.Errorf("get status from %s: %w", c.Socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get status from %s: %s", c.Socket, resp.Status)
	}
	var st RawStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("decode status: %w", err)
	}
	return &st, nil
}
