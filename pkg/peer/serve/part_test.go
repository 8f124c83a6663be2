package serve_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/serve"
)

// TestPartFollowsReloads: the part exists with peers off (disabled, ready, nothing listening); a
// reload that turns peers on starts the server, one that changes peers.listen moves it, one that
// turns peers off closes the port — each without a restart, as every other part does.
func TestPartFollowsReloads(t *testing.T) {
	cfg := &config.NodeConfig{NodeName: "n1", DataDir: t.TempDir()}
	cfg.Default()
	p, err := serve.NewPart(daemon.Deps{Config: cfg}, serve.PartOptions{Auth: allow{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitState := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); p.State() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("state %q, want %q (ready: %v)", p.State(), want, p.Ready())
			}
		}
	}
	get := func(addr string) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, peer.BundleURL("http://"+addr, "0000000000000000000000000000000000000000000000000000000000000000"), nil)
		req.Header.Set("Authorization", "Bearer ok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	waitState(serve.StateDisabled)
	if err := p.Ready(); err != nil || p.Addr() != "" {
		t.Fatalf("peers off: ready %v, addr %q; want ready and nothing listening", err, p.Addr())
	}

	on := *cfg
	on.Peers.Enabled, on.Peers.Listen = true, "127.0.0.1:0"
	p.Reconfigure(&on)
	waitState(serve.StateServing)
	first := p.Addr()
	if code, err := get(first); err != nil || code != http.StatusNotFound {
		t.Fatalf("after enabling: GET %s = %d, %v; want 404 from a serving peer", first, code, err)
	}

	moved := on
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port to move to
	if err != nil {
		t.Fatal(err)
	}
	moved.Peers.Listen = ln.Addr().String()
	ln.Close()
	p.Reconfigure(&moved)
	for deadline := time.Now().Add(5 * time.Second); p.Addr() != moved.Peers.Listen; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after changing peers.listen: addr %q, want %q", p.Addr(), moved.Peers.Listen)
		}
	}
	if code, err := get(moved.Peers.Listen); err != nil || code != http.StatusNotFound {
		t.Fatalf("after moving: GET = %d, %v", code, err)
	}
	if _, err := get(first); err == nil {
		t.Errorf("the old address %s still answers after peers.listen moved", first)
	}

	off := moved
	off.Peers.Enabled = false
	p.Reconfigure(&off)
	waitState(serve.StateDisabled)
	if _, err := get(moved.Peers.Listen); err == nil {
		t.Errorf("%s still answers after peers were turned off", moved.Peers.Listen)
	}
	if err := p.Ready(); err != nil {
		t.Errorf("disabled: ready %v, want nil", err)
	}
}

// TestPartListenFailureIsReported: a port another process holds fails the part's readiness with the
// setting named, and the daemon goes on; a reload to a free port recovers.
func TestPartListenFailureIsReported(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg := &config.NodeConfig{NodeName: "n1", DataDir: t.TempDir()}
	cfg.Default()
	cfg.Peers.Enabled, cfg.Peers.Listen = true, held.Addr().String()
	p, err := serve.NewPart(daemon.Deps{Config: cfg}, serve.PartOptions{Auth: allow{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	for deadline := time.Now().Add(5 * time.Second); p.State() != serve.StateFailed; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("state %q with the port taken, want failed", p.State())
		}
	}
	if err := p.Ready(); err == nil || !strings.Contains(err.Error(), "peers.listen") {
		t.Fatalf("ready %v, want an error naming peers.listen", err)
	}
	fixed := *cfg
	fixed.Peers.Listen = "127.0.0.1:0"
	p.Reconfigure(&fixed)
	for deadline := time.Now().Add(5 * time.Second); p.State() != serve.StateServing; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("state %q after a reload to a free port, want serving", p.State())
		}
	}
}
