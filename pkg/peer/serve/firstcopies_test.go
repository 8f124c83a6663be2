package serve_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/serve"
)

// TestSpreadFirstCopiesFirst: while the upload is used (no cap: always), a file this node already
// sent whole goes to nobody while a downloader asked, within the last second, for a file it sent in
// fewer copies; once nobody asks for that one, the second copy goes out.
func TestSpreadFirstCopiesFirst(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry()).Peers
	srv, clock := stagedHandler(t, serve.Options{Metrics: m, ServeSlots: 8})

	if resp := getRangeAs(t, srv, "n1", "r2", "a.bin", "bytes=0-9"); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("n1, all of a.bin: %s", resp.Status)
	}
	clock.step(time.Second) // n1's copy is over; a.bin has gone out whole once
	if resp := getAs(t, srv, "n2", "r2", "b.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("n2, b.bin (no copy out yet): %s", resp.Status)
	}
	resp := getAs(t, srv, "n3", "r2", "a.bin")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(peer.HeaderBusyFile) != "1" {
		t.Errorf("n3, a second copy of a.bin while b.bin (none out) is asked for: %s %v; want 503 with %s", resp.Status, resp.Header, peer.HeaderBusyFile)
	}
	if n := testutil.ToFloat64(m.Refused.WithLabelValues(serve.ReasonSpread)); n != 1 {
		t.Errorf("refused{reason=spread} = %v, want 1", n)
	}
	if resp := getAs(t, srv, "n3", "r2", "b.bin"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("n3, b.bin while n2 holds its copy: %s; want 503", resp.Status)
	}
	clock.step(1100 * time.Millisecond) // nobody asked for b.bin within the last second
	if resp := getAs(t, srv, "n3", "r2", "a.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Errorf("n3, a.bin once nobody asks for a file with fewer copies: %s; want it served", resp.Status)
	}
}

// TestSpreadPublishedWhileTheUploadIsUsed: a published revision's file goes to one downloader at a
// time, and first copies first, while the upload is used (the bytes served over the last second
// reach ¾ of the cap); with room in the upload every downloader gets it.
func TestSpreadPublishedWhileTheUploadIsUsed(t *testing.T) {
	root := cache(t)
	publishBig(t, root)
	h := serve.New(serve.Options{Auth: allow{}, Root: root, ServeSlots: 8, UploadLimit: 1 << 20,
		Published: func(model, rev string) bool { return model == "org/m" && rev == "r1" }})
	clock := freeze(h)
	srv := httptest.NewServer(h)
	defer srv.Close()

	// A mebibyte at a mebibyte per second: the upload is used (the clock stands still meanwhile).
	if resp := getRangeAs(t, srv, "n1", "r1", "big.bin", "bytes=0-1048575"); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("n1, all of big.bin: %s", resp.Status)
	}
	if resp := getAs(t, srv, "n2", "r1", "big.bin"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(peer.HeaderBusyFile) != "1" {
		t.Errorf("n2, big.bin within n1's copy: %s; want 503 with %s", resp.Status, peer.HeaderBusyFile)
	}
	clock.step(600 * time.Millisecond) // n1's copy is over; the bytes are still within the last second
	if resp := getAs(t, srv, "n2", "r1", "sub/w.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Errorf("n2, sub/w.bin (no copy out yet): %s; want it served", resp.Status)
	}
	if resp := getAs(t, srv, "n3", "r1", "big.bin"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("n3, a second copy of big.bin while sub/w.bin is asked for: %s; want 503", resp.Status)
	}
	clock.step(1100 * time.Millisecond) // the mebibyte left the last second: the upload has room
	if resp := getAs(t, srv, "n3", "r1", "big.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Errorf("n3, big.bin with room in the upload: %s; want it served", resp.Status)
	}
}

// getRangeAs asks srv for range rng of file of org/m at rev as downloader node, the body read and
// closed.
func getRangeAs(t *testing.T, srv *httptest.Server, node, rev, file, rng string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, peer.WeightsURL(srv.URL, "org/m", rev, file), nil)
	req.Header.Set("Authorization", "Bearer ok")
	req.Header.Set(peer.HeaderNode, node)
	req.Header.Set("Range", rng)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// publishBig adds big.bin, a mebibyte, to org/m@r1 in root.
func publishBig(t *testing.T, root *fsroot.Root) {
	t.Helper()
	m := root.Name(fsroot.MustPath("models--org--m"))
	if err := os.WriteFile(filepath.Join(m, "blobs", "big"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../blobs/big", filepath.Join(m, "snapshots", "r1", "big.bin")); err != nil {
		t.Fatal(err)
	}
}
