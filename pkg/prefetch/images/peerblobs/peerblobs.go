// Package peerblobs fetches one image layer blob from the warm peers that hold it, in pieces from
// several peers at once, into a file the caller then hands to the image store. A fresh node of a
// group scaling out otherwise pulls every multi-GB layer from the registry while its neighbours hold
// verified copies one hop away (Spegel's and Dragonfly's point). The digest is the only identity:
// the bytes are hashed in order as the pieces land and the blob is accepted only when the hash is
// the digest, so a peer can cost time, never a wrong layer. It does no containerd I/O: the caller
// says where the bytes go (pkg/prefetch/images/containerd places them in the content store).
package peerblobs

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"warmd.io/warmd/pkg/bounded"
	"warmd.io/warmd/pkg/peer"
)

// Defaults of Options.
const (
	DefaultPiece   = 16 << 20
	DefaultPerPeer = 2
	DefaultProbe   = 3 * time.Second
	DefaultStall   = 10 * time.Second
	// DefaultBusyGrace is how long a peer may answer busy (its serving slots all taken by other
	// downloaders) without serving a piece before this layer stops asking it: the registry is the
	// other source, and a multi-GB layer from it takes minutes.
	DefaultBusyGrace = 15 * time.Second
)

// ErrNoPeer is Fetch's answer when no peer holds the blob (or none could be asked): the caller
// takes it from the registry, as without peers.
var ErrNoPeer = errors.New("no peer holds the blob")

// ErrCorrupt is Fetch's answer when the peers' bytes do not hash to the digest: the file holds
// nothing usable and every peer that sent a piece was dropped as corrupt.
var ErrCorrupt = errors.New("the peers' bytes do not match the layer digest")

// Options configure Fetch.
type Options struct {
	// Token returns the bearer token presented to peers (the projected ServiceAccount token).
	Token func() (string, error)
	// Node is this node's name (peer.HeaderNode), so a serving peer counts it as one downloader.
	Node string
	// Client makes the requests; nil: peer.NewClient (direct, never through a proxy). Every request
	// is wrapped in a bounded.Client (Stall).
	Client bounded.Doer
	// Piece is the size of one ranged request. Default DefaultPiece.
	Piece int64
	// PerPeer is the ranged requests in flight to one peer. Default DefaultPerPeer.
	PerPeer int
	// Probe bounds the HEAD that asks a peer whether it holds the blob. Default DefaultProbe.
	Probe time.Duration
	// Stall fails a request that waited this long while receiving under 64 KiB; the peer is
	// dropped. Default DefaultStall.
	Stall time.Duration
	// BusyGrace bounds how long a peer that answers busy (503 with Retry-After, peer.Busy) is
	// waited for: its worker puts the piece back for the other peers, rests until the Retry-After
	// and asks again; a peer busy this long since it last served a piece is left for this layer,
	// not dropped (it is fine, only full). Default DefaultBusyGrace.
	BusyGrace time.Duration
	// OnBytes sees the verified bytes taken from peers (counted once the whole blob matched).
	OnBytes func(n int64)
	// OnProgress sees the bytes of the blob received so far (pieces written, not yet verified), for
	// a pull's progress display; called from the piece workers, never two at once.
	OnProgress func(received int64)
	// OnDrop sees every peer dropped and why (peer.DropError, peer.DropCorrupt).
	OnDrop func(base, reason string)
	Log    *slog.Logger
}

func (o *Options) defaults() {
	if o.Piece <= 0 {
		o.Piece = DefaultPiece
	}
	if o.PerPeer <= 0 {
		o.PerPeer = DefaultPerPeer
	}
	if o.Probe <= 0 {
		o.Probe = DefaultProbe
	}
	if o.Stall <= 0 {
		o.Stall = DefaultStall
	}
	if o.BusyGrace <= 0 {
		o.BusyGrace = DefaultBusyGrace
	}
	if o.Client == nil {
		o.Client = peer.NewClient(peer.DefaultHeaderTimeout)
	}
	o.Client = &bounded.Client{Inner: o.Client, Stall: o.Stall}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Result says where a fetched blob came from.
type Result struct {
	Holders []string // the peers that held it and were asked for pieces (base URLs)
	Bytes   int64    // bytes taken from them (the blob's size, on success)
	Dropped int      // peers dropped during the fetch
	Busy    int      // peers left for staying busy longer than BusyGrace (not dropped)
}

// Fetch writes the blob d of size bytes into f (from offset 0, f's size made size) from the peers
// (base URLs) that answer a HEAD with its size, PerPeer ranged requests per peer at a time, and
// returns nil only when f's bytes hash to d. A peer that fails a request is dropped and its piece
// goes to another; a busy one is rested and asked again, up to BusyGrace; when every peer is gone
// before the blob is complete, or no peer holds it,
// Fetch fails (ErrNoPeer when none held it) and f holds nothing to use.
func Fetch(ctx context.Context, o Options, peers []string, d digest.Digest, size int64, f *os.File) (Result, error) {
	o.defaults()
	var res Result
	if d.Algorithm() != digest.SHA256 || d.Validate() != nil {
		return res, fmt.Errorf("layer digest %s: only sha256 blobs are fetched from peers", d)
	}
	holders := probe(ctx, o, peers, d, size)
	if len(holders) == 0 {
		return res, ErrNoPeer
	}
	res.Holders = holders
	if err := f.Truncate(size); err != nil {
		return res, fmt.Errorf("size the blob file: %w", err)
	}
	j := newJob(o, d, size, f)
	var wg sync.WaitGroup
	for _, base := range holders {
		hs := &holderState{}
		for range o.PerPeer {
			wg.Go(func() { j.work(ctx, base, hs) })
		}
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	sum, hashErr := hashInOrder(ctx, f, j.n, o.Piece, size, j.completed, workersDone)
	<-workersDone
	res.Dropped, res.Busy = int(j.dropped.Load()), int(j.busy.Load())
	if hashErr != nil {
		return res, hashErr
	}
	if left := j.left.Load(); left > 0 {
		return res, fmt.Errorf("every peer holding layer %s failed (%d) or stayed busy (%d) with %d of %d pieces left: %w", d, res.Dropped, res.Busy, left, j.n, ErrNoPeer)
	}
	if digest.NewDigestFromBytes(digest.SHA256, sum) != d {
		for _, base := range holders {
			if o.OnDrop != nil {
				o.OnDrop(base, peer.DropCorrupt)
			}
		}
		res.Dropped = len(holders)
		return res, fmt.Errorf("layer %s from %d peers: %w", d, len(holders), ErrCorrupt)
	}
	res.Bytes = size
	if o.OnBytes != nil {
		o.OnBytes(size)
	}
	return res, nil
}

// job is one blob's pieces: those waiting (queue: every piece fits, so a failed one is put back
// without blocking), those written (completed, for the hash) and how many are left.
type job struct {
	o         Options
	d         digest.Digest
	size      int64
	f         *os.File
	n         int
	queue     chan int
	completed chan int
	left      atomic.Int64
	finished  chan struct{} // closed when left reaches 0
	dropped   atomic.Int32
	busy      atomic.Int32

	progressMu sync.Mutex
	received   int64 // bytes of the pieces written (progressMu)
}

func newJob(o Options, d digest.Digest, size int64, f *os.File) *job {
	n := int((size + o.Piece - 1) / o.Piece)
	j := &job{o: o, d: d, size: size, f: f, n: n, queue: make(chan int, n), completed: make(chan int, n), finished: make(chan struct{})}
	for i := range n {
		j.queue <- i
	}
	j.left.Store(int64(n))
	return j
}

// holderState is one peer's, shared by its workers: whether it is gone for this layer (failed, or
// busy past BusyGrace), and since when it has answered busy without serving a piece (0: it serves).
type holderState struct {
	gone      atomic.Bool
	busySince atomic.Int64 // unix nanoseconds
}

// work takes pieces from the queue and writes them from the peer at base until none is left, ctx
// ends, or the peer is gone: a piece that fails goes back to the queue; a failed peer is dropped
// once and its workers stop; a busy one is rested (busy) and asked again.
func (j *job) work(ctx context.Context, base string, hs *holderState) {
	for {
		var i int
		select {
		case i = <-j.queue:
		case <-j.finished:
			return
		case <-ctx.Done():
			return
		}
		if hs.gone.Load() {
			j.queue <- i
			return
		}
		off := int64(i) * j.o.Piece
		err := getPiece(ctx, j.o, base, j.d, off, min(j.o.Piece, j.size-off), j.f)
		if err != nil {
			j.queue <- i
			var b *peer.BusyError
			if errors.As(err, &b) && ctx.Err() == nil {
				if !j.rest(ctx, base, hs, b.After) {
					return
				}
				continue
			}
			if ctx.Err() == nil && hs.gone.CompareAndSwap(false, true) {
				j.dropped.Add(1)
				j.o.Log.Warn("peer dropped for this layer", "peer", base, "layer", j.d.String(), "err", err)
				if j.o.OnDrop != nil {
					j.o.OnDrop(base, peer.DropError)
				}
			}
			return
		}
		hs.busySince.Store(0)
		j.progress(min(j.o.Piece, j.size-off))
		j.completed <- i
		if j.left.Add(-1) == 0 {
			close(j.finished)
		}
	}
}

// rest waits out a busy answer's Retry-After (after), within what is left of BusyGrace since the
// peer first answered busy, and reports whether to ask the peer again: false once the grace is over
// (the peer is left for this layer, once, without a drop) or the fetch ended.
func (j *job) rest(ctx context.Context, base string, hs *holderState, after time.Duration) bool {
	now := time.Now()
	hs.busySince.CompareAndSwap(0, now.UnixNano())
	left := j.o.BusyGrace - now.Sub(time.Unix(0, hs.busySince.Load()))
	if left <= 0 {
		if hs.gone.CompareAndSwap(false, true) {
			j.busy.Add(1)
			j.o.Log.Info("peer stayed busy; this layer no longer waits for it", "peer", base, "layer", j.d.String(), "waited", j.o.BusyGrace)
		}
		return false
	}
	t := time.NewTimer(min(after, left))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-j.finished:
	case <-ctx.Done():
	}
	return false
}

// progress counts a written piece of n bytes and reports the bytes received so far.
func (j *job) progress(n int64) {
	if j.o.OnProgress == nil {
		return
	}
	j.progressMu.Lock()
	defer j.progressMu.Unlock()
	j.received += n
	j.o.OnProgress(j.received)
}

// FetchIndex reads the checkpoint index a peer keeps for layer d from the first of peers that has
// one (base URL returned), at most max bytes within the Stall rule. The index is hostile: the
// caller validates it and checks its decode against the layer's diff ID.
func FetchIndex(ctx context.Context, o Options, peers []string, d digest.Digest, max int64) ([]byte, string, error) {
	o.defaults()
	err := ErrNoPeer
	for _, base := range peers {
		var p []byte
		if p, err = getIndex(ctx, o, base, d, max); err == nil {
			return p, base, nil
		}
	}
	return nil, "", err
}

func getIndex(ctx context.Context, o Options, base string, d digest.Digest, max int64) ([]byte, error) {
	resp, err := do(ctx, o, http.MethodGet, peer.ImageIndexURL(base, d.Encoded()), "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, ErrNoPeer
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("index: %s", bounded.Text(resp.Status, 64))
	case resp.ContentLength > max:
		return nil, fmt.Errorf("index: %d bytes offered, at most %d", resp.ContentLength, max)
	}
	if err := bounded.CheckEncoding(resp.Header.Get("Content-Encoding")); err != nil {
		return nil, err
	}
	p, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	if int64(len(p)) > max {
		return nil, fmt.Errorf("index: over %d bytes", max)
	}
	return p, nil
}

// hashInOrder hashes f's pieces in order as they complete (a piece is hashed once every piece
// before it is), so verification ends moments after the last byte lands. It returns when all n
// are hashed, or when the workers are done (or ctx ended) with some missing.
func hashInOrder(ctx context.Context, f *os.File, n int, piece, size int64, completed <-chan int, workersDone <-chan struct{}) ([]byte, error) {
	h := sha256.New()
	ready := make([]bool, n)
	next := 0
	buf := make([]byte, 1<<20)
	for next < n {
		select {
		case i := <-completed:
			ready[i] = true
		case <-workersDone:
			select {
			case i := <-completed:
				ready[i] = true
			default:
				return nil, nil // some pieces never came: the caller reports it
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		for next < n && ready[next] {
			off := int64(next) * piece
			if _, err := io.CopyBuffer(h, io.NewSectionReader(f, off, min(piece, size-off)), buf); err != nil {
				return nil, fmt.Errorf("read back the fetched blob: %w", err)
			}
			next++
		}
	}
	return h.Sum(nil), nil
}

// probe asks every peer at once, each within o.Probe, whether it holds d at size bytes, and returns
// those that do. A 404 is a peer without it; any other failure drops the peer (DropError).
func probe(ctx context.Context, o Options, peers []string, d digest.Digest, size int64) []string {
	var mu sync.Mutex
	var out []string
	var wg sync.WaitGroup
	for _, base := range peers {
		wg.Go(func() {
			ok, err := head(ctx, o, base, d, size)
			switch {
			case ok:
				mu.Lock()
				out = append(out, base)
				mu.Unlock()
			case err != nil && ctx.Err() == nil:
				o.Log.Info("peer not asked for this layer", "peer", base, "layer", d.String(), "err", err)
				if o.OnDrop != nil {
					o.OnDrop(base, peer.DropError)
				}
			}
		})
	}
	wg.Wait()
	return out
}

func head(ctx context.Context, o Options, base string, d digest.Digest, size int64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Probe)
	defer cancel()
	resp, err := do(ctx, o, http.MethodHead, peer.ImageBlobURL(base, d.Encoded()), "")
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("HEAD: %s", bounded.Text(resp.Status, 64))
	}
	if got, err := strconv.ParseInt(resp.Header.Get(peer.HeaderSize), 10, 64); err != nil || got != size {
		return false, fmt.Errorf("HEAD: the peer's copy is %s bytes, the manifest says %d", bounded.Text(resp.Header.Get(peer.HeaderSize), 24), size)
	}
	return true, nil
}

// getPiece reads bytes [off, off+n) of d from base into f at off, refusing an answer of any other
// range or encoding and reading at most n bytes of it.
func getPiece(ctx context.Context, o Options, base string, d digest.Digest, off, n int64, f *os.File) error {
	resp, err := do(ctx, o, http.MethodGet, peer.ImageBlobURL(base, d.Encoded()), fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := peer.Busy(resp); err != nil {
		return err
	}
	if err := bounded.CheckEncoding(resp.Header.Get("Content-Encoding")); err != nil {
		return err
	}
	if err := bounded.CheckRange(resp.StatusCode, resp.Header.Get("Content-Range"), resp.ContentLength, off, n); err != nil {
		return err
	}
	got, err := io.Copy(io.NewOffsetWriter(f, off), io.LimitReader(resp.Body, n))
	if err != nil {
		return fmt.Errorf("read bytes %d-%d: %w", off, off+n-1, err)
	}
	if got != n {
		return fmt.Errorf("read bytes %d-%d: the answer ended after %d bytes", off, off+n-1, got)
	}
	return nil
}

func do(ctx context.Context, o Options, method, url, rng string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	if o.Token != nil {
		tok, err := o.Token()
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if o.Node != "" {
		req.Header.Set(peer.HeaderNode, o.Node)
	}
	// Bytes as stored: without this net/http asks for gzip and decodes it itself, unbounded.
	req.Header.Set("Accept-Encoding", "identity")
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	return o.Client.Do(req)
}
