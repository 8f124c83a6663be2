package serve_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/serve"
)

// With one slot, a second node (same address, its own name) is told busy — 503, Retry-After,
// counted — until the first has been idle for the idle time; the first's further requests pass, and a
// HEAD takes no slot.
func TestServeSlots(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry()).Peers
	h := serve.New(serve.Options{Auth: allow{}, Root: cache(t), Metrics: m, ServeSlots: 1, SlotIdle: 300 * time.Millisecond,
		Published: func(string, string) bool { return true }})
	// The slots' clock is the test's: requests take what time they take, and only step() moves it.
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	serve.SetSlotClock(h, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	step := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	srv := httptest.NewServer(h)
	defer srv.Close()
	u := peer.WeightsURL(srv.URL, "org/m", "r1", "sub/w.bin")
	do := func(method, node string) *http.Response { return slotRequest(t, method, u, node) }
	if r := do(http.MethodGet, "node-a"); r.StatusCode != http.StatusPartialContent {
		t.Fatalf("first downloader: %s", r.Status)
	}
	r := do(http.MethodGet, "node-b")
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("second downloader while the first holds the slot: %s, Retry-After %q; want 503 with Retry-After 1", r.Status, r.Header.Get("Retry-After"))
	}
	if r := do(http.MethodGet, "node-a"); r.StatusCode != http.StatusPartialContent {
		t.Errorf("the slot holder's next chunk: %s", r.Status)
	}
	if r := do(http.MethodHead, "node-b"); r.StatusCode != http.StatusPartialContent {
		t.Errorf("HEAD while busy: %s", r.Status)
	}
	if got := testutil.ToFloat64(m.Refused.WithLabelValues(serve.ReasonBusy)); got != 1 {
		t.Errorf("busy refusals %v, want 1", got)
	}
	step(400 * time.Millisecond)
	if r := do(http.MethodGet, "node-b"); r.StatusCode != http.StatusPartialContent {
		t.Errorf("second downloader after the first went idle: %s", r.Status)
	}
	if r := do(http.MethodGet, "node-a"); r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("first downloader after the second took the slot: %s", r.Status)
	}
}

// A node whose downloaders leave its upload cap unused takes one more past its slots (a second after
// the last), and only then; without a cap the slots are a hard limit.
func TestServeSlotsOverflow(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int64
		want  int // status of the second downloader, a while after the first
	}{
		{"cap unused", 64 << 20, http.StatusPartialContent},
		{"no cap", 0, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := serve.New(serve.Options{Auth: allow{}, Root: cache(t), ServeSlots: 1, SlotIdle: time.Hour, UploadLimit: tc.limit,
				Published: func(string, string) bool { return true }})
			var mu sync.Mutex
			now := time.Unix(1000, 0)
			serve.SetSlotClock(h, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
			srv := httptest.NewServer(h)
			defer srv.Close()
			u := peer.WeightsURL(srv.URL, "org/m", "r1", "sub/w.bin")
			get := func(node string) int { return slotRequest(t, http.MethodGet, u, node).StatusCode }
			if got := get("node-a"); got != http.StatusPartialContent {
				t.Fatalf("first downloader: %d", got)
			}
			if got := get("node-b"); got != http.StatusServiceUnavailable {
				t.Fatalf("second downloader in the same instant: %d, want 503", got)
			}
			mu.Lock()
			now = now.Add(1500 * time.Millisecond)
			mu.Unlock()
			if got := get("node-b"); got != tc.want {
				t.Fatalf("second downloader 1.5s later, node-a still holding its slot: %d, want %d", got, tc.want)
			}
			if tc.want == http.StatusPartialContent {
				if got := get("node-c"); got != http.StatusServiceUnavailable {
					t.Errorf("third downloader in the same instant as the second: %d, want 503", got)
				}
			}
		})
	}
}

// slotRequest asks for the first 4 bytes of u as node, reads the body and returns the response.
func slotRequest(t *testing.T, method, u, node string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	req.Header.Set("Authorization", "Bearer ok")
	req.Header.Set(peer.HeaderNode, node)
	req.Header.Set("Range", "bytes=0-3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
