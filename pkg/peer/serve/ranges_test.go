package serve_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/serve"
)

// Many ranges cannot cost a multiple of the file: overlapping and adjacent ones are coalesced, and
// more than serve.MaxRanges after that (or thousands of one-byte ranges) are refused with 416.
func TestServeBoundsRanges(t *testing.T) {
	h := serve.New(serve.Options{Auth: allow{}, Root: cache(t), Metrics: metrics.New(prometheus.NewRegistry()).Peers,
		Published: func(model, rev string) bool { return model == "org/m" && rev == "r1" }})
	srv := httptest.NewServer(h)
	defer srv.Close()
	u := peer.WeightsURL(srv.URL, "org/m", "r1", "sub/w.bin") // "0123456789"
	// 4,000 one-byte ranges over a 10-byte file: adjacent and repeated, they coalesce to one.
	var many []string
	for i := range 4000 {
		many = append(many, fmt.Sprintf("%d-%d", i%10, i%10))
	}
	resp, body := peertest.Get(t, http.MethodGet, u, "ok", "bytes="+strings.Join(many, ","))
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("4000 range specs: %s, %d bytes; want 416 before any parsing work", resp.Status, len(body))
	}
	resp, body = peertest.Get(t, http.MethodGet, u, "ok", "bytes=0-1,2-3,1-4,5-5,6-9")
	if resp.StatusCode != http.StatusPartialContent || string(body) != "0123456789" || resp.Header.Get("Content-Range") != "bytes 0-9/10" {
		t.Errorf("adjacent ranges: %s %q %q, want one coalesced range", resp.Status, body, resp.Header.Get("Content-Range"))
	}
	resp, body = peertest.Get(t, http.MethodGet, u, "ok", "bytes=0-0,2-2,4-4,6-6,8-8")
	if resp.StatusCode != http.StatusPartialContent || len(body) > 1000 {
		t.Errorf("5 ranges: %s, %d bytes", resp.Status, len(body))
	}
	resp, _ = peertest.Get(t, http.MethodGet, u, "ok", "bytes=0-0,2-2,4-4,6-6,8-8,-1,1-1,3-3,5-5")
	if resp.StatusCode != http.StatusPartialContent {
		t.Errorf("9 specs that coalesce to 1: %s", resp.Status)
	}
	resp, _ = peertest.Get(t, http.MethodGet, u, "ok", "bytes=0-0,2-2,4-4,6-6,8-8,1-1,3-3,5-5,7-7,9-9")
	if resp.StatusCode != http.StatusPartialContent {
		t.Errorf("10 ranges that coalesce to one: %s", resp.Status)
	}
	resp, body = peertest.Get(t, http.MethodGet, u, "ok", "bytes=0-0,2-2,4-4,6-6,8-8,0-0,2-2,4-4,6-6,8-8")
	if resp.StatusCode != http.StatusPartialContent {
		t.Errorf("repeated ranges: %s %q", resp.Status, body)
	}
}
