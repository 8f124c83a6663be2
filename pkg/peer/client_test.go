package peer_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"warmd.io/warmd/pkg/peer"
)

// TestClientNeverUsesAProxy: with HTTP_PROXY and HTTPS_PROXY set, as on a node whose way out goes
// through a proxy, the peer client still connects to peers directly.
func TestClientNeverUsesAProxy(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://proxy.invalid:3128")
	t.Setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
	c := peer.NewClient(3 * time.Second)
	tr, ok := c.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("transport %T, want *http.Transport", c.Transport)
	}
	req := &http.Request{URL: &url.URL{Scheme: "http", Host: "10.0.0.7:9401", Path: peer.WeightsPath}}
	if tr.Proxy != nil {
		if p, err := tr.Proxy(req); p != nil || err != nil {
			t.Errorf("a request to a peer goes through %v (%v); want it direct", p, err)
		}
	}
	if tr.ResponseHeaderTimeout != 3*time.Second {
		t.Errorf("header timeout %s, want 3s", tr.ResponseHeaderTimeout)
	}
}
