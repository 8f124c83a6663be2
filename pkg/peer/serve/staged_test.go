package serve_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/serve"
)

// A revision still downloading is served file by file, only the files the engine named verified, and
// the files endpoint says which; once published, the whole revision.
func TestServeStagedFiles(t *testing.T) {
	root := cache(t)
	staging := filepath.Join(root.Name(fsroot.MustPath(".staging")), "org--m@r2", "data")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"0": "verified!!", "1": "not yet verified"} {
		if err := os.WriteFile(filepath.Join(staging, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var published atomic.Bool
	h := serve.New(serve.Options{Auth: allow{}, Root: root,
		Published: func(model, rev string) bool {
			return model == "org/m" && (rev == "r1" || (rev == "r2" && published.Load()))
		},
		Staged: func(model, rev string) map[string]string {
			if model != "org/m" || rev != "r2" {
				return nil
			}
			return map[string]string{"a.bin": ".staging/org--m@r2/data/0", "gone.bin": ".staging/org--m@r2/data/9",
				"dir.bin": ".staging/org--m@r2/data"}
		}})
	srv := httptest.NewServer(h)
	defer srv.Close()

	resp, body := peertest.Get(t, http.MethodGet, peer.WeightsURL(srv.URL, "org/m", "r2", "a.bin"), "ok", "bytes=0-7")
	if resp.StatusCode != http.StatusPartialContent || string(body) != "verified" || resp.Header.Get(peer.HeaderSize) != "10" ||
		resp.Header.Get("Content-Range") != "bytes 0-7/10" {
		t.Errorf("verified staged file: %s %q %v", resp.Status, body, resp.Header)
	}
	for _, tc := range []struct{ name, file string }{
		{"a file not verified yet", "b.bin"},
		{"a verified file gone from staging", "gone.bin"},
		{"a staged name that is a directory", "dir.bin"},
	} {
		if resp, body := peertest.Get(t, http.MethodGet, peer.WeightsURL(srv.URL, "org/m", "r2", tc.file), "ok", ""); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %s %q, want 404", tc.name, resp.Status, body)
		}
	}
	if resp, _ := peertest.Get(t, http.MethodGet, peer.WeightsURL(srv.URL, "org/m", "r3", "a.bin"), "ok", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a revision neither published nor staged: %s", resp.Status)
	}

	files := func(rev string) (int, peer.WeightFiles) {
		t.Helper()
		resp, body := peertest.Get(t, http.MethodGet, peer.WeightFilesURL(srv.URL, "org/m", rev), "ok", "")
		var wf peer.WeightFiles
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, &wf); err != nil {
				t.Fatalf("files of %s: %v: %q", rev, err, body)
			}
		}
		return resp.StatusCode, wf
	}
	if code, wf := files("r2"); code != http.StatusOK || wf.Complete || !slices.Equal(wf.Files, []string{"a.bin", "dir.bin", "gone.bin"}) {
		t.Errorf("files of a download in flight: %d %+v", code, wf)
	}
	if code, wf := files("r1"); code != http.StatusOK || !wf.Complete || len(wf.Files) != 0 {
		t.Errorf("files of a published revision: %d %+v", code, wf)
	}
	if code, _ := files("r3"); code != http.StatusNotFound {
		t.Errorf("files of an unknown revision: %d, want 404", code)
	}
	if resp, _ := peertest.Get(t, http.MethodGet, peer.WeightFilesURL(srv.URL, "org/m", "r2"), "bad", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("files without a good token: %s", resp.Status)
	}
	if resp, _ := peertest.Get(t, http.MethodGet, peer.WeightFilesURL(srv.URL, "../etc", "r2"), "ok", ""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("files of a bad model name: %s", resp.Status)
	}

	// Published: the revision is whole, and its files come from the snapshot (r2 has none here).
	published.Store(true)
	if code, wf := files("r2"); code != http.StatusOK || !wf.Complete {
		t.Errorf("files once published: %d %+v", code, wf)
	}
}

// A file of which only some parts are verified is served range by range: a range inside its
// verified parts is answered, one reaching past them, or a request for the whole file, is 404; the
// files endpoint names those parts' spans.
func TestServeVerifiedParts(t *testing.T) {
	root := cache(t)
	staging := filepath.Join(root.Name(fsroot.MustPath(".staging")), "org--m@r2", "data")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "0"), []byte("0123456789abcdefghij"), 0o644); err != nil {
		t.Fatal(err)
	}
	spans := [][2]int64{{0, 5}, {10, 15}}
	h := serve.New(serve.Options{Auth: allow{}, Root: root,
		Published: func(string, string) bool { return false },
		Pieces: func(model, rev string) map[string]serve.Pieces {
			if model != "org/m" || rev != "r2" {
				return nil
			}
			return map[string]serve.Pieces{"p.bin": {Path: ".staging/org--m@r2/data/0", Spans: spans},
				"escape.bin": {Path: "../../etc/passwd", Spans: spans}}
		}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct {
		rng, want string
		code      int
	}{
		{"bytes=0-4", "01234", http.StatusPartialContent},
		{"bytes=11-14", "bcde", http.StatusPartialContent},
		{"bytes=0-4,10-14", "", http.StatusPartialContent}, // two ranges, both inside: multipart
		{"bytes=0-5", "", http.StatusNotFound},             // one byte past the first part
		{"bytes=4-10", "", http.StatusNotFound},            // across the unverified gap
		{"bytes=15-", "", http.StatusNotFound},
		{"bytes=-3", "", http.StatusNotFound}, // the last bytes, not verified
		{"", "", http.StatusNotFound},         // the whole file
		{"bytes=x-y", "", http.StatusNotFound},
	} {
		resp, body := peertest.Get(t, http.MethodGet, peer.WeightsURL(srv.URL, "org/m", "r2", "p.bin"), "ok", tc.rng)
		if resp.StatusCode != tc.code || (tc.want != "" && string(body) != tc.want) {
			t.Errorf("Range %q: %s %q, want %d %q", tc.rng, resp.Status, body, tc.code, tc.want)
		}
	}
	if resp, body := peertest.Get(t, http.MethodGet, peer.WeightsURL(srv.URL, "org/m", "r2", "escape.bin"), "ok", "bytes=0-4"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a piece path outside the root: %s %q, want 404", resp.Status, body)
	}
	resp, body := peertest.Get(t, http.MethodGet, peer.WeightFilesURL(srv.URL, "org/m", "r2"), "ok", "")
	var wf peer.WeightFiles
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &wf) != nil || wf.Complete || len(wf.Files) != 0 ||
		!slices.Equal(wf.Pieces["p.bin"], spans) {
		t.Errorf("files with verified parts: %s %q", resp.Status, body)
	}
}
