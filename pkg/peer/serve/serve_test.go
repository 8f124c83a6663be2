package serve_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/auth"
	"warmd.io/warmd/pkg/peer/serve"
)

// allow passes one token; the API server's own verdicts are tested in pkg/peer/auth against a real one.
type allow struct{}

func (allow) Check(_ context.Context, token string) (auth.Verdict, string, error) {
	if token == "ok" {
		return auth.OK, "", nil
	}
	return auth.Unauthenticated, "no", nil
}

// cache lays out a published snapshot as the weights engine does (a link into blobs/), a file linked
// out of blobs/, and a staging dir.
func cache(t *testing.T) *fsroot.Root {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	m := filepath.Join(dir, "models--org--m")
	must(os.MkdirAll(filepath.Join(m, "blobs"), 0o755))
	must(os.MkdirAll(filepath.Join(m, "snapshots", "r1", "sub"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, ".staging"), 0o755))
	must(os.WriteFile(filepath.Join(m, "blobs", "abc"), []byte("0123456789"), 0o644))
	must(os.WriteFile(filepath.Join(dir, ".staging", "secret"), []byte("staged"), 0o644))
	must(os.Symlink("../../../blobs/abc", filepath.Join(m, "snapshots", "r1", "sub", "w.bin")))
	must(os.Symlink("../../../../.staging/secret", filepath.Join(m, "snapshots", "r1", "sub", "leak")))
	r, err := fsroot.Open(dir)
	must(err)
	t.Cleanup(func() { r.Close() })
	return r
}

func TestServe(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry()).Peers
	h := serve.New(serve.Options{Auth: allow{}, Root: cache(t), Metrics: m,
		Published: func(model, rev string) bool { return model == "org/m" && rev == "r1" }})
	srv := httptest.NewServer(h)
	defer srv.Close()
	do := func(method, url, rng string) (*http.Response, string) {
		resp, b := peertest.Get(t, method, url, "ok", rng)
		return resp, string(b)
	}
	u := peer.WeightsURL(srv.URL, "org/m", "r1", "sub/w.bin")
	if resp, body := do(http.MethodGet, u, "bytes=2-5"); resp.StatusCode != http.StatusPartialContent || body != "2345" ||
		resp.Header.Get("Content-Range") != "bytes 2-5/10" || resp.Header.Get(peer.HeaderSize) != "10" {
		t.Errorf("range: %s %q %v", resp.Status, body, resp.Header)
	}
	if resp, body := do(http.MethodHead, u, ""); resp.StatusCode != http.StatusOK || body != "" || resp.Header.Get(peer.HeaderSize) != "10" {
		t.Errorf("head: %s %q", resp.Status, body)
	}
	for _, tc := range []struct {
		name, method, url string
		want              int
	}{
		{"a link out of blobs (into staging)", http.MethodGet, peer.WeightsURL(srv.URL, "org/m", "r1", "sub/leak"), http.StatusNotFound},
		{"unpublished revision", http.MethodGet, peer.WeightsURL(srv.URL, "org/m", "r2", "sub/w.bin"), http.StatusNotFound},
		{"a directory", http.MethodGet, peer.WeightsURL(srv.URL, "org/m", "r1", "sub"), http.StatusNotFound},
		{"dot-dot", http.MethodGet, peer.WeightsURL(srv.URL, "org/m", "r1", "../../blobs/abc"), http.StatusBadRequest},
		{"write", http.MethodPut, u, http.StatusMethodNotAllowed},
		{"other path", http.MethodGet, srv.URL + "/metrics", http.StatusNotFound},
	} {
		if resp, body := do(tc.method, tc.url, ""); resp.StatusCode != tc.want {
			t.Errorf("%s: %s %q, want %d", tc.name, resp.Status, body, tc.want)
		}
	}
	if got := testutil.ToFloat64(m.ServedBytes); got != 4 {
		t.Errorf("served bytes %v, want 4", got)
	}
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %v %v", resp.Status, err)
	}
	resp.Body.Close()
	if got := testutil.ToFloat64(m.Refused.WithLabelValues(serve.ReasonUnauthenticated)); got != 1 {
		t.Errorf("unauthenticated refusals %v", got)
	}
}

// Ranges of a file larger than the cap's pieces come back exact, whole or in part, and every byte
// is counted: the file goes to the connection piece by piece (sendfile) under the cap.
func TestServeLargeRanges(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "models--org--m")
	if err := os.MkdirAll(filepath.Join(m, "blobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(m, "snapshots", "r1"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20+77)
	rand.NewChaCha8([32]byte{1}).Read(data)
	if err := os.WriteFile(filepath.Join(m, "blobs", "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../blobs/big", filepath.Join(m, "snapshots", "r1", "big.bin")); err != nil {
		t.Fatal(err)
	}
	root, err := fsroot.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	pm := metrics.New(prometheus.NewRegistry()).Peers
	h := serve.New(serve.Options{Auth: allow{}, Root: root, Metrics: pm, UploadLimit: 512 << 20, ServeSlots: 2,
		Published: func(string, string) bool { return true }})
	srv := httptest.NewServer(h)
	defer srv.Close()
	u := peer.WeightsURL(srv.URL, "org/m", "r1", "big.bin")
	var served int
	for _, tc := range []struct {
		rng      string
		from, to int // the bytes wanted, data[from:to]
		status   int
	}{
		{"bytes=1000-2000999", 1000, 2001000, http.StatusPartialContent},
		{"", 0, len(data), http.StatusOK},
		{"bytes=-5000", len(data) - 5000, len(data), http.StatusPartialContent},
		{fmt.Sprintf("bytes=%d-", 1<<20), 1 << 20, len(data), http.StatusPartialContent},
	} {
		resp, body := peertest.Get(t, http.MethodGet, u, "ok", tc.rng)
		if resp.StatusCode != tc.status || !bytes.Equal(body, data[tc.from:tc.to]) {
			t.Errorf("range %q: %s, %d bytes; want %d, %d bytes equal to the file's", tc.rng, resp.Status, len(body), tc.status, tc.to-tc.from)
		}
		served += tc.to - tc.from
	}
	// The handler counts a body's last bytes after its write returns, which can be after the client
	// read them: wait a moment for the count, never accept a different one.
	got := testutil.ToFloat64(pm.ServedBytes)
	for deadline := time.Now().Add(2 * time.Second); got != float64(served) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		got = testutil.ToFloat64(pm.ServedBytes)
	}
	if got != float64(served) {
		t.Errorf("served bytes %v, want %d", got, served)
	}
}
