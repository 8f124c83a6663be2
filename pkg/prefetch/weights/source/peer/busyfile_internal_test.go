package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/prefetch"
)

// countingOrigin fails nothing and counts the ranges read from it.
type countingOrigin struct {
	prefetch.Source
	reads atomic.Int32
}

func (o *countingOrigin) GetRange(_ context.Context, _ fsroot.Path, _, n int64, w io.Writer) (int64, error) {
	o.reads.Add(1)
	k, err := w.Write(make([]byte, n))
	return int64(k), err
}

func (o *countingOrigin) String() string { return "s3://origin/" }

// notSeed never holds the seed role: a chunk no peer sends waits for one.
type notSeed struct{}

func (notSeed) Acquire(context.Context) (bool, string, error) { return false, "other-node", nil }
func (notSeed) Renew(context.Context) error                   { return nil }
func (notSeed) Release(context.Context) error                 { return nil }

// TestBusyFileRestsOnlyThatFile: a peer that answers busy for one file alone (its copy goes to
// another downloader, peer.HeaderBusyFile) stays askable for its other files; a download that can
// put the chunk back gets it back (prefetch.ErrDeferred) at once instead of waiting, reading nothing
// from the origin; a caller that cannot (the sha256 manifest's read) waits for the peer instead.
func TestBusyFileRestsOnlyThatFile(t *testing.T) {
	const size = 8
	body := []byte("01234567")
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if strings.Contains(r.URL.RawQuery, "a.bin") {
			w.Header().Set("Retry-After", "1")
			w.Header().Set(peer.HeaderBusyFile, "1")
			http.Error(w, "this file goes to another downloader now", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set(peer.HeaderSize, fmt.Sprint(size))
		w.Header().Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", size-1, size))
		w.Header().Set("Content-Length", fmt.Sprint(size))
		w.WriteHeader(http.StatusPartialContent)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	origin := &countingOrigin{}
	s := New(Options{Origin: origin, Model: "org/m", Revision: "r", Peers: []string{srv.URL}, Seed: notSeed{},
		Token: func() (string, error) { return "t", nil }})
	s.sizes["a.bin"], s.sizes["b.bin"] = size, size

	var buf bytes.Buffer
	n, err := s.GetRange(prefetch.Deferrable(context.Background()), fsroot.MustPath("a.bin"), 0, size, &buf)
	if !errors.Is(err, prefetch.ErrDeferred) || n != 0 {
		t.Fatalf("a.bin, busy at its one holder, in a download that can put it back: %d bytes, %v; want 0 and ErrDeferred", n, err)
	}
	if origin.reads.Load() != 0 {
		t.Errorf("the origin was read %d times; a node without the seed role waits for its peers", origin.reads.Load())
	}
	if got := s.Holders("a.bin", 0, size); got != 0 {
		t.Errorf("holders of a.bin that can send it now: %d, want 0 (it rests there)", got)
	}
	if got := s.Holders("b.bin", 0, size); got != 1 {
		t.Errorf("holders of b.bin that can send it now: %d, want 1 (only a.bin is busy there)", got)
	}
	buf.Reset()
	if n, err := s.GetRange(context.Background(), fsroot.MustPath("b.bin"), 0, size, &buf); err != nil || n != size || !bytes.Equal(buf.Bytes(), body) {
		t.Errorf("b.bin from the same peer right after: %d bytes %q, %v", n, buf.Bytes(), err)
	}

	before := asked.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := s.GetRange(ctx, fsroot.MustPath("a.bin"), 0, size, io.Discard); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a.bin for a caller that cannot put it back: %v; want it to wait for the peer until its context ends", err)
	}
	if asked.Load() == before {
		t.Error("the waiting caller never asked the peer again after its Retry-After")
	}
}
