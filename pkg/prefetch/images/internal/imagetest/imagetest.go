// Package imagetest gives the image backends' tests real things to pull from and into: an in-process
// OCI registry (go-containerregistry's) on 127.0.0.1 with optional basic auth and a gate that holds
// blob downloads, random images and indexes pushed to it, and private containerd daemons a test may
// kill and restart (the shared ones from `make test` are never restarted).
package imagetest

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry is an in-process registry.
type Registry struct {
	// Host is 127.0.0.1:PORT.
	Host string
	srv  *httptest.Server
	user string
	pass string

	mu       sync.Mutex
	corrupt  map[string]bool // blob digests served with a flipped first byte
	gets     map[string]int  // blob GETs answered, by digest
	pushed   []string        // manifest and index digests pushed, for cleanup
	gate     chan struct{}   // non-nil: blob GETs wait for it to close
	entered  chan struct{}   // closed at the first gated blob GET
	enterOne sync.Once
	held     map[string]int // blob GETs waiting at the gate, by repository
}

// Options for a registry.
type Options struct {
	// User and Pass turn on basic auth for every request.
	User, Pass string
}

// NewRegistry starts a registry that lives until the test ends.
func NewRegistry(t testing.TB, o Options) *Registry {
	t.Helper()
	r := &Registry{user: o.User, pass: o.Pass}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.user != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != r.user || p != r.pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="warmd-test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.mu.Lock()
			gate, entered := r.gate, r.entered
			r.mu.Unlock()
			if gate != nil {
				repo, _, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/v2/"), "/blobs/")
				r.hold(repo, 1)
				r.enterOne.Do(func() { close(entered) })
				select {
				case <-gate:
					r.hold(repo, -1)
				case <-req.Context().Done():
					r.hold(repo, -1)
					return
				}
			}
		}
		r.mu.Lock()
		last := req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:]
		bad := r.corrupt[last]
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			if r.gets == nil {
				r.gets = map[string]int{}
			}
			r.gets[last]++
		}
		r.mu.Unlock()
		if bad && req.Method == http.MethodGet {
			w = &flipWriter{ResponseWriter: w}
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

// Corrupt makes the registry serve blob d with its first byte flipped, as a broken proxy would.
func (r *Registry) Corrupt(d string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.corrupt == nil {
		r.corrupt = map[string]bool{}
	}
	r.corrupt[d] = true
}

type flipWriter struct {
	http.ResponseWriter
	done bool
}

func (f *flipWriter) Write(p []byte) (int, error) {
	if !f.done && len(p) > 0 {
		q := append([]byte(nil), p...)
		q[0] ^= 0xff
		f.done = true
		return f.ResponseWriter.Write(q)
	}
	return f.ResponseWriter.Write(p)
}

// BlobGets is how many GETs of blob d (sha256:…) the registry answered.
func (r *Registry) BlobGets(d string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[d]
}

// Close stops the registry (to test a registry that is down).
func (r *Registry) Close() { r.srv.Close() }

func (r *Registry) hold(repo string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held == nil {
		r.held = map[string]int{}
	}
	if r.held[repo] += n; r.held[repo] <= 0 {
		delete(r.held, repo)
	}
}

// HeldRepositories is how many repositories have a blob GET waiting at the gate now: with one
// image per repository, the pulls in flight.
func (r *Registry) HeldRepositories() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// Gate makes blob downloads wait until release is called; entered closes when the first one waits.
func (r *Registry) Gate() (entered <-chan struct{}, release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gate, r.entered, r.enterOne = make(chan struct{}), make(chan struct{}), sync.Once{}
	g := r.gate
	var once sync.Once
	return r.entered, func() {
		once.Do(func() {
			r.mu.Lock()
			r.gate = nil
			r.mu.Unlock()
			close(g)
		})
	}
}

func (r *Registry) auth() remote.Option {
	if r.user == "" {
		return remote.WithAuth(authn.Anonymous)
	}
	return remote.WithAuth(&authn.Basic{Username: r.user, Password: r.pass})
}

// Ref returns host/repo:tag.
func (r *Registry) Ref(repoTag string) string { return r.Host + "/" + repoTag }

// PushRandom pushes a random image of layers layers of size bytes each to repoTag and returns it.
func (r *Registry) PushRandom(t testing.TB, repoTag string, size, layers int64) v1.Image {
	t.Helper()
	img, err := random.Image(size, layers)
	if err != nil {
		t.Fatal(err)
	}
	r.Push(t, repoTag, img)
	return img
}

// Push writes img to repoTag.
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) {
	t.Helper()
	ref, err := name.ParseReference(r.Ref(repoTag), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, r.auth()); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	r.record(t, img)
}

// PushIndex pushes an index holding one random image per platform ("linux/amd64") and returns it
// with the images in the same order.
func (r *Registry) PushIndex(t testing.TB, repoTag string, size, layers int64, plats ...string) (v1.ImageIndex, []v1.Image) {
	t.Helper()
	var idx v1.ImageIndex = empty.Index
	var imgs []v1.Image
	for _, p := range plats {
		img, err := random.Image(size, layers)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := v1.ParsePlatform(p)
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: pl}})
	}
	ref, err := name.ParseReference(r.Ref(repoTag), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, r.auth()); err != nil {
		t.Fatalf("push index %s: %v", ref, err)
	}
	r.record(t, idx)
	for _, img := range imgs {
		r.record(t, img)
	}
	return idx, imgs
}

func (r *Registry) record(t testing.TB, d interface{ Digest() (v1.Hash, error) }) {
	dg := Digest(t, d)
	r.mu.Lock()
	r.pushed = append(r.pushed, dg)
	r.mu.Unlock()
}

// Pushed lists the digests of every image and index pushed.
func (r *Registry) Pushed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.pushed...)
}

// Digest returns the digest of an image or index as a string.
func Digest(t testing.TB, d interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// LayerDigests lists an image's layer digests.
func LayerDigests(t testing.TB, img v1.Image) []string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.String())
	}
	return out
}

// DockerConfig returns a kubernetes.io/dockerconfigjson payload for host.
func DockerConfig(host, user, pass string) string {
	return fmt.Sprintf(`{"auths":{%q:{"username":%q,"password":%q}}}`, host, user, pass)
}
