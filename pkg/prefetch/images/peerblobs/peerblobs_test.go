package peerblobs_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/auth"
	"warmd.io/warmd/pkg/peer/serve"
	"warmd.io/warmd/pkg/prefetch/images/peerblobs"
)

type allow struct{}

func (allow) Check(_ context.Context, token string) (auth.Verdict, string, error) {
	if token == "ok" {
		return auth.OK, "", nil
	}
	return auth.Unauthenticated, "no", nil
}

// dirBlobs serves the blobs of a directory named by their sha256, as a warm node's content store.
type dirBlobs string

func (d dirBlobs) OpenBlob(_ context.Context, sha string) (*os.File, error) {
	f, err := os.Open(filepath.Join(string(d), sha))
	if err != nil {
		return nil, fs.ErrNotExist
	}
	return f, nil
}

// OpenIndex serves <sha>.idx.
func (d dirBlobs) OpenIndex(ctx context.Context, sha string) (*os.File, error) {
	return d.OpenBlob(ctx, sha+".idx")
}

// warmPeer is the real peer server holding blobs; wrap, when set, sits in front of it.
func warmPeer(t *testing.T, blobs map[digest.Digest][]byte, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	dir := t.TempDir()
	for d, b := range blobs {
		if err := os.WriteFile(filepath.Join(dir, d.Encoded()), b, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	var h http.Handler = serve.New(serve.Options{Auth: allow{}, ImageLayers: dirBlobs(dir)})
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func blob(t *testing.T, n int) ([]byte, digest.Digest) {
	t.Helper()
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16)})
	_, _ = r.Read(b)
	return b, digest.FromBytes(b)
}

// TestFetchIndex: the first peer with an index for the layer gives it; a peer without one is
// passed over; one larger than the bound is refused.
func TestFetchIndex(t *testing.T) {
	_, d := blob(t, 1<<10)
	small, big := []byte("index bytes"), bytes.Repeat([]byte("i"), 4<<10)
	dirWith := func(idx []byte) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, d.Encoded()+".idx"), idx, 0o444); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(serve.New(serve.Options{Auth: allow{}, ImageLayers: dirBlobs(dir)}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	none := warmPeer(t, nil, nil)
	var dr drops
	p, from, err := peerblobs.FetchIndex(t.Context(), dr.opts(), []string{none, dirWith(small)}, d, 1<<10)
	if err != nil || !bytes.Equal(p, small) || from == none {
		t.Errorf("FetchIndex = %q from %s, %v: want the second peer's index", p, from, err)
	}
	if _, _, err := peerblobs.FetchIndex(t.Context(), dr.opts(), []string{dirWith(big)}, d, 1<<10); err == nil {
		t.Error("an index of 4 KiB under a 1 KiB bound was taken")
	}
	if _, _, err := peerblobs.FetchIndex(t.Context(), dr.opts(), []string{none}, d, 1<<10); !errors.Is(err, peerblobs.ErrNoPeer) {
		t.Errorf("no peer with an index: %v, want ErrNoPeer", err)
	}
}

type drops struct {
	mu sync.Mutex
	by map[string]string
}

func (d *drops) opts() peerblobs.Options {
	d.by = map[string]string{}
	return peerblobs.Options{Token: func() (string, error) { return "ok", nil }, Node: "fresh", Piece: 64 << 10,
		OnDrop: func(base, reason string) { d.mu.Lock(); d.by[base] = reason; d.mu.Unlock() }}
}

func fetch(t *testing.T, o peerblobs.Options, peers []string, d digest.Digest, size int64) ([]byte, peerblobs.Result, error) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "blob")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := peerblobs.Fetch(t.Context(), o, peers, d, size, f)
	got, _ := os.ReadFile(f.Name())
	return got, res, err
}

// counting counts the GETs a peer answers.
func counting(n *int, mu *sync.Mutex) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				mu.Lock()
				*n++
				mu.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	}
}

func TestFetchSpreadsPiecesOverEveryPeerThatHoldsTheBlob(t *testing.T) {
	b, d := blob(t, 1<<20+12345)
	var mu sync.Mutex
	var gets [3]int
	peers := []string{
		warmPeer(t, map[digest.Digest][]byte{d: b}, counting(&gets[0], &mu)),
		warmPeer(t, map[digest.Digest][]byte{d: b}, counting(&gets[1], &mu)),
		warmPeer(t, nil, counting(&gets[2], &mu)), // holds nothing: a 404 to the HEAD, never asked again
	}
	var dr drops
	o := dr.opts()
	var received []int64 // OnProgress is never called concurrently: no lock
	o.OnProgress = func(n int64) { received = append(received, n) }
	got, res, err := fetch(t, o, peers, d, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b) {
		t.Fatal("fetched bytes differ")
	}
	if len(received) != 17 || received[len(received)-1] != int64(len(b)) || !slices.IsSorted(received) {
		t.Errorf("progress %v: want 17 reports rising to %d", received, len(b))
	}
	if len(res.Holders) != 2 || res.Bytes != int64(len(b)) || res.Dropped != 0 || len(dr.by) != 0 {
		t.Errorf("result %+v, drops %v: want 2 peers, the whole blob, none dropped", res, dr.by)
	}
	if gets[0] == 0 || gets[1] == 0 || gets[2] != 0 || gets[0]+gets[1] != 17 {
		t.Errorf("GETs per peer %v: want the 17 pieces spread over the two holders", gets)
	}
}

func TestFetchRefusals(t *testing.T) {
	b, d := blob(t, 1<<20)
	good := func(t *testing.T) string { return warmPeer(t, map[digest.Digest][]byte{d: b}, nil) }
	failAfter := func(n int) func(http.Handler) http.Handler {
		var mu sync.Mutex
		return func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n--
				bad := n < 0 && r.Method == http.MethodGet
				mu.Unlock()
				if bad {
					http.Error(w, "gone", http.StatusInternalServerError)
					return
				}
				h.ServeHTTP(w, r)
			})
		}
	}
	wholeFile := func(h http.Handler) http.Handler { // ignores Range: a 200 of the whole blob
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Header.Del("Range")
			h.ServeHTTP(w, r)
		})
	}
	t.Run("a peer that fails midway is dropped and the other finishes", func(t *testing.T) {
		var dr drops
		bad := warmPeer(t, map[digest.Digest][]byte{d: b}, failAfter(2))
		got, res, err := fetch(t, dr.opts(), []string{bad, good(t)}, d, int64(len(b)))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("fetch: %v (bytes equal %v)", err, bytes.Equal(got, b))
		}
		if dr.by[bad] != peer.DropError || res.Dropped != 1 {
			t.Errorf("drops %v, result %+v: want the failing peer dropped with reason error", dr.by, res)
		}
	})
	t.Run("wrong bytes fail the digest and drop the senders as corrupt", func(t *testing.T) {
		var dr drops
		bad := warmPeer(t, map[digest.Digest][]byte{d: b}, peertest.Corrupting)
		_, _, err := fetch(t, dr.opts(), []string{bad}, d, int64(len(b)))
		if !errors.Is(err, peerblobs.ErrCorrupt) || dr.by[bad] != peer.DropCorrupt {
			t.Errorf("err %v, drops %v: want ErrCorrupt and the peer dropped as corrupt", err, dr.by)
		}
	})
	t.Run("a copy of another size is not asked for", func(t *testing.T) {
		var dr drops
		other := warmPeer(t, map[digest.Digest][]byte{d: b[:len(b)-1]}, nil)
		_, _, err := fetch(t, dr.opts(), []string{other}, d, int64(len(b)))
		if !errors.Is(err, peerblobs.ErrNoPeer) || dr.by[other] != peer.DropError {
			t.Errorf("err %v, drops %v: want ErrNoPeer with the peer dropped", err, dr.by)
		}
	})
	t.Run("an answer of the wrong range is refused", func(t *testing.T) {
		var dr drops
		bad := warmPeer(t, map[digest.Digest][]byte{d: b}, wholeFile)
		_, _, err := fetch(t, dr.opts(), []string{bad}, d, int64(len(b)))
		if !errors.Is(err, peerblobs.ErrNoPeer) || dr.by[bad] != peer.DropError {
			t.Errorf("err %v, drops %v: want every peer failed (ErrNoPeer) and the peer dropped", err, dr.by)
		}
	})
	t.Run("no peer holds it", func(t *testing.T) {
		var dr drops
		_, _, err := fetch(t, dr.opts(), []string{warmPeer(t, nil, nil)}, d, int64(len(b)))
		if !errors.Is(err, peerblobs.ErrNoPeer) || len(dr.by) != 0 {
			t.Errorf("err %v, drops %v: want ErrNoPeer and nobody dropped (a 404 is no fault)", err, dr.by)
		}
	})
	t.Run("a token the peer refuses", func(t *testing.T) {
		var dr drops
		o := dr.opts()
		o.Token = func() (string, error) { return "wrong", nil }
		p := good(t)
		_, _, err := fetch(t, o, []string{p}, d, int64(len(b)))
		if !errors.Is(err, peerblobs.ErrNoPeer) || !strings.Contains(dr.by[p], peer.DropError) {
			t.Errorf("err %v, drops %v", err, dr.by)
		}
	})
}

// busyFor answers the first n GETs as a peer whose serving slots are all taken (503, Retry-After 1),
// n < 0: every GET; retryAfter "" sends a 503 without Retry-After (a failure, not busy).
func busyFor(n int, retryAfter string) func(http.Handler) http.Handler {
	var mu sync.Mutex
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			busy := r.Method == http.MethodGet && n != 0
			if busy && n > 0 {
				n--
			}
			mu.Unlock()
			if busy {
				if retryAfter != "" {
					w.Header().Set("Retry-After", retryAfter)
				}
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

// A busy peer is rested and asked again, not dropped; one busy past BusyGrace is left for the
// layer (the registry serves it) without counting as a failure; a 503 without Retry-After is one.
func TestBusyPeers(t *testing.T) {
	b, d := blob(t, 256<<10)
	t.Run("busy a while, then serves", func(t *testing.T) {
		var dr drops
		o := dr.opts()
		start := time.Now()
		got, res, err := fetch(t, o, []string{warmPeer(t, map[digest.Digest][]byte{d: b}, busyFor(3, "1"))}, d, int64(len(b)))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("Fetch: %v (bytes equal %v); want the blob from the one peer once its slot freed", err, bytes.Equal(got, b))
		}
		if res.Dropped != 0 || res.Busy != 0 || len(dr.by) != 0 {
			t.Errorf("result %+v, drops %v: a busy peer is not dropped", res, dr.by)
		}
		if el := time.Since(start); el < time.Second {
			t.Errorf("took %v: the Retry-After (1 s) was not waited", el)
		}
	})
	t.Run("busy past the grace", func(t *testing.T) {
		var dr drops
		o := dr.opts()
		o.BusyGrace = 1500 * time.Millisecond
		start := time.Now()
		_, res, err := fetch(t, o, []string{warmPeer(t, map[digest.Digest][]byte{d: b}, busyFor(-1, "1"))}, d, int64(len(b)))
		if !errors.Is(err, peerblobs.ErrNoPeer) || res.Busy != 1 || res.Dropped != 0 || len(dr.by) != 0 {
			t.Fatalf("Fetch: %v, result %+v, drops %v; want ErrNoPeer with the peer left as busy, not dropped", err, res, dr.by)
		}
		if el := time.Since(start); el < o.BusyGrace || el > o.BusyGrace+3*time.Second {
			t.Errorf("gave up after %v, want about the grace (%v)", el, o.BusyGrace)
		}
	})
	t.Run("a 503 without Retry-After is a failure", func(t *testing.T) {
		var dr drops
		p := warmPeer(t, map[digest.Digest][]byte{d: b}, busyFor(-1, ""))
		_, res, err := fetch(t, dr.opts(), []string{p}, d, int64(len(b)))
		if !errors.Is(err, peerblobs.ErrNoPeer) || res.Dropped != 1 || dr.by[p] != peer.DropError {
			t.Fatalf("Fetch: %v, result %+v, drops %v; want the peer dropped as an error", err, res, dr.by)
		}
	})
}
