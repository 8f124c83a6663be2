package serve_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/serve"
)

// layerDir serves the files of a dir by name, as the images part serves its pinned layers.
type layerDir string

func (d layerDir) OpenBlob(_ context.Context, sha string) (*os.File, error) {
	f, err := os.Open(filepath.Join(string(d), sha))
	if err != nil {
		return nil, fs.ErrNotExist
	}
	return f, nil
}

// OpenIndex serves <sha>.idx.
func (d layerDir) OpenIndex(ctx context.Context, sha string) (*os.File, error) {
	return d.OpenBlob(ctx, sha+".idx")
}

func TestServeImageLayers(t *testing.T) {
	dir := t.TempDir()
	data := []byte(strings.Repeat("layer bytes ", 1000))
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(dir, sha), data, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, sha+".idx"), []byte("the index"), 0o444); err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("0", 64)
	with := httptest.NewServer(serve.New(serve.Options{Auth: allow{}, ImageLayers: layerDir(dir)}))
	defer with.Close()
	without := httptest.NewServer(serve.New(serve.Options{Auth: allow{}}))
	defer without.Close()
	if resp, body := peertest.Get(t, http.MethodGet, peer.ImageIndexURL(with.URL, sha), "ok", ""); resp.StatusCode != http.StatusOK || string(body) != "the index" {
		t.Errorf("the layer's index: %d %q", resp.StatusCode, body)
	}
	if resp, _ := peertest.Get(t, http.MethodGet, peer.ImageIndexURL(with.URL, other), "ok", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the index of a layer not held: %d, want 404", resp.StatusCode)
	}
	for _, tc := range []struct {
		name, base, sha, token, rng string
		method                      string
		code                        int
		body                        string
	}{
		{"a held layer, ranged", with.URL, sha, "ok", "bytes=6-10", http.MethodGet, http.StatusPartialContent, "bytes"},
		{"a held layer, whole", with.URL, sha, "ok", "", http.MethodGet, http.StatusOK, string(data)},
		{"HEAD says the size", with.URL, sha, "ok", "", http.MethodHead, http.StatusOK, ""},
		{"a layer not held", with.URL, other, "ok", "", http.MethodGet, http.StatusNotFound, ""},
		{"no image store", without.URL, sha, "ok", "", http.MethodGet, http.StatusNotFound, ""},
		{"not a digest", with.URL, "../" + sha[3:], "ok", "", http.MethodGet, http.StatusBadRequest, ""},
		{"upper-case hex", with.URL, strings.ToUpper(sha), "ok", "", http.MethodGet, http.StatusBadRequest, ""},
		{"no token", with.URL, sha, "", "", http.MethodGet, http.StatusUnauthorized, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := peertest.Get(t, tc.method, peer.ImageBlobURL(tc.base, tc.sha), tc.token, tc.rng)
			if resp.StatusCode != tc.code {
				t.Fatalf("%s: %d, want %d (%s)", tc.name, resp.StatusCode, tc.code, body)
			}
			if tc.body != "" && string(body) != tc.body {
				t.Errorf("body %.40q…, want %.40q…", body, tc.body)
			}
			if tc.code == http.StatusOK && resp.Header.Get(peer.HeaderSize) != "12000" {
				t.Errorf("%s = %q, want 12000", peer.HeaderSize, resp.Header.Get(peer.HeaderSize))
			}
		})
	}
}
