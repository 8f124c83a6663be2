package serve_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/serve"
)

// TestSpreadOneDownloaderPerFile: a file of a download in flight goes to one downloader at a time;
// another asking meanwhile is told that this file alone is busy (503, Retry-After,
// peer.HeaderBusyFile) and gets any other file; once the first downloader's copy has been idle for
// the idle time (2 s for an unfinished first copy) the file goes to the next; a published
// revision's files go to every downloader.
func TestSpreadOneDownloaderPerFile(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry()).Peers
	srv, clock := stagedHandler(t, serve.Options{Metrics: m, ServeSlots: 8,
		Published: func(model, rev string) bool { return model == "org/m" && rev == "r1" }})
	step := clock.step

	get := func(node, rev, file string) *http.Response { t.Helper(); return getAs(t, srv, node, rev, file) }
	if resp := get("n1", "r2", "a.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("first downloader of a.bin: %s", resp.Status)
	}
	resp := get("n2", "r2", "a.bin")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(peer.HeaderBusyFile) != "1" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second downloader of a.bin within the idle time: %s %v; want 503 with %s and Retry-After", resp.Status, resp.Header, peer.HeaderBusyFile)
	}
	if n := testutil.ToFloat64(m.Refused.WithLabelValues(serve.ReasonSpread)); n != 1 {
		t.Errorf("refused{reason=spread} = %v, want 1", n)
	}
	if resp := get("n2", "r2", "b.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Errorf("second downloader, another file: %s; want it served", resp.Status)
	}
	if resp := get("n1", "r2", "a.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Errorf("first downloader asking a.bin again: %s; want it served (its copy)", resp.Status)
	}
	for _, node := range []string{"n2", "n3"} {
		if resp := get(node, "r1", "sub/w.bin"); resp.StatusCode != http.StatusPartialContent {
			t.Errorf("%s, a published file: %s; want every downloader served", node, resp.Status)
		}
	}
	step(time.Second) // past the idle time, but n1's first copy of a.bin is unfinished: still n1's
	if resp := get("n2", "r2", "a.bin"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("second downloader of a.bin, a second after n1's unfinished first copy: %s; want 503", resp.Status)
	}
	step(2100 * time.Millisecond) // n1's unfinished first copy has been idle longer than firstIdle
	if resp := get("n2", "r2", "a.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Errorf("second downloader of a.bin after the first's copy went idle: %s; want it served", resp.Status)
	}
	if resp := get("n1", "r2", "a.bin"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("first downloader once a.bin went to the second: %s; want 503", resp.Status)
	}
}

// TestSpreadOnlyWhileTheUploadIsUsed: a node whose upload is far from its cap sends a file in flight
// to a second downloader at once: a copy from upload that would idle costs nobody.
func TestSpreadOnlyWhileTheUploadIsUsed(t *testing.T) {
	root := cache(t)
	stageFiles(t, root, "0")
	h := serve.New(serve.Options{Auth: allow{}, Root: root, ServeSlots: 8, UploadLimit: 1 << 30,
		Published: func(string, string) bool { return false },
		Staged:    func(string, string) map[string]string { return map[string]string{"a.bin": ".staging/org--m@r2/0"} }})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, node := range []string{"n1", "n2"} {
		if resp := getAs(t, srv, node, "r2", "a.bin"); resp.StatusCode != http.StatusPartialContent {
			t.Errorf("%s, a.bin with the upload idle: %s; want it served", node, resp.Status)
		}
	}
}

// getAs asks srv for bytes 0-3 of file of org/m at rev as downloader node, the body read and closed.
func getAs(t *testing.T, srv *httptest.Server, node, rev, file string) *http.Response {
	t.Helper()
	return getRangeAs(t, srv, node, rev, file, "bytes=0-3")
}

// stageFiles writes each name, with the same ten bytes, into the staging directory of org/m at r2
// (a download in flight: the Staged map of a test names them).
func stageFiles(t *testing.T, root *fsroot.Root, names ...string) {
	t.Helper()
	staging := filepath.Join(root.Name(fsroot.MustPath(".staging")), "org--m@r2")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(staging, name), []byte("verified!!"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// stagedHandler serves org/m@r2, still downloading here, whose verified files a.bin, b.bin and
// c.bin are staged, with opts (Root, Auth and Staged set here; Published says no revision is, unless
// opts says otherwise), its clocks frozen.
func stagedHandler(t *testing.T, opts serve.Options) (*httptest.Server, *fakeClock) {
	t.Helper()
	opts.Root = cache(t)
	stageFiles(t, opts.Root, "0", "1", "2")
	opts.Auth = allow{}
	if opts.Published == nil {
		opts.Published = func(string, string) bool { return false }
	}
	opts.Staged = func(model, rev string) map[string]string {
		return map[string]string{"a.bin": ".staging/org--m@r2/0", "b.bin": ".staging/org--m@r2/1", "c.bin": ".staging/org--m@r2/2"}
	}
	h := serve.New(opts)
	clock := freeze(h)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, clock
}

// fakeClock is a clock for the slots and the spread rule that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) step(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// freeze gives h's slots and spread rule one clock that stands still until stepped.
func freeze(h *serve.Handler) *fakeClock {
	c := &fakeClock{now: time.Unix(1_000_000, 0)}
	serve.SetSpreadClock(h, c.Now)
	serve.SetSlotClock(h, c.Now)
	return c
}
