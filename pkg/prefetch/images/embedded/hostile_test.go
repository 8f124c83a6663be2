package embedded_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/internal/canary"
	"warmd.io/warmd/pkg/prefetch/images/embedded"
	"warmd.io/warmd/pkg/prefetch/images/oci"
)

// hostileRegistry serves one manifest whose config or layer digest is not a digest, for any repo and
// tag, and "{}" for any blob.
func hostileRegistry(t *testing.T, badDigest string, asLayer bool) string {
	t.Helper()
	cfg := fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":2}`, badDigest)
	layers := "[]"
	if asLayer {
		sum := sha256.Sum256([]byte("{}"))
		cfg = fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":2}`, hex.EncodeToString(sum[:]))
		layers = fmt.Sprintf(`[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":%q,"size":2}]`, badDigest)
	}
	manifest := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s,"layers":%s}`, cfg, layers)
	sum := sha256.Sum256([]byte(manifest))
	dgst := "sha256:" + hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v2/":
			w.WriteHeader(http.StatusOK)
		case strings.Contains(r.URL.Path, "/manifests/"):
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Docker-Content-Digest", dgst)
			w.Header().Set("Content-Length", fmt.Sprint(len(manifest)))
			if r.Method == http.MethodGet {
				w.Write([]byte(manifest))
			}
		case strings.Contains(r.URL.Path, "/blobs/"):
			w.Header().Set("Content-Length", "2")
			w.Write([]byte("{}"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Digests come from the registry and name blobs in the content store: one that is not a valid
// digest fails the pull, and nothing outside the store's dir changes.
func TestPullRefusesInvalidDigests(t *testing.T) {
	for _, bad := range []string{"sha256:../../../../canary/pwned", "sha256:" + strings.Repeat("../", 20) + "x", "../../canary/x", "sha256:/abs", "sha999:00", "sha256:ABCDEF"} {
		for _, asLayer := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/layer=%v", bad, asLayer), func(t *testing.T) {
				c := canary.New(t)
				dir := filepath.Join(filepath.Dir(c.Path), "data", "images")
				s, err := embedded.New(embedded.Options{Dir: dir, Registry: oci.Registry{}})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				host := hostileRegistry(t, bad, asLayer)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				r, err := s.Resolve(ctx, host+"/evil/img:v1")
				if err == nil {
					err = s.Pull(ctx, r, nil)
				}
				if err == nil || !strings.Contains(err.Error(), "digest") {
					t.Errorf("pull with digest %q: %v; want a refusal naming the digest", bad, err)
				}
				c.Check(t)
				if ents, _ := os.ReadDir(filepath.Dir(c.Path)); len(ents) != 2 {
					t.Errorf("beside the data dir: %v", ents)
				}
			})
		}
	}
}
