// Package peer is the weights Source that reads a model's chunks from warm peers (other warmd nodes
// whose Node labels say they hold the model verified) and from the origin for whatever no peer
// delivers. The origin stays the source of truth: List, Head and Parts go to it, so the engine verifies
// every file against the origin's identity before publishing, as with any source. A peer that errors
// or answers with another file's size is dropped for the rest of the fetch and its chunk continues from
// the origin where the peer stopped; a chunk the engine asks for again (its file failed verification)
// comes from the origin, and when its bytes differ from what a peer gave, that peer is dropped as
// corrupt. Peer loss mid-transfer thus costs only the bytes of its chunks not yet received.
//
// A peer that is busy serving other nodes (503 with Retry-After: its serving slots are held) is not a
// failure: that chunk goes to another peer and the busy one is asked again after Retry-After. When
// every peer is busy the chunk goes to the origin if this node holds the seed role (the daemon's:
// a Lease per model revision, so one node of a group at a time reads it), else it waits for a slot. While a fetch runs
// it looks the warm peers up again now and then (Refresh), so nodes that finished meanwhile serve it
// too: that is how warm nodes multiply per wave (docs/fleet.md).
package peer

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"warmd.io/warmd/pkg/bounded"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/prefetch"
)

// Options configure a Source.
type Options struct {
	// Origin is the model's configured source (s3://, file://): identity and fallback.
	Origin prefetch.Source
	// Model and Revision name what the peers are asked for.
	Model, Revision string
	// Peers are the base URLs (http://host:port) of warm peers, at most K.
	Peers []string
	// Discover, when set, finds the peers at the first GetRange instead (it may wait for a seed): a
	// model that is already published never asks, and never waits.
	Discover func(ctx context.Context) ([]string, error)
	// Refresh, when set, looks the warm peers up again during the fetch (at a chunk, when the last
	// look is older than RefreshEvery); peers not known yet are added while fewer than MaxPeers usable
	// (not dropped, not busy) ones remain.
	Refresh func(ctx context.Context) ([]string, error)
	// Partial, when set, looks up nodes whose download of the revision may be in flight (their label
	// says cold or image), in random order: each is asked which files it verified so far, and serves
	// those before it is warm (partial.go). Asked at the first chunk and at every Refresh while fewer
	// than MaxPeers warm peers are usable.
	Partial func(ctx context.Context) ([]string, error)
	// RefreshEvery is the least time between two Refresh calls. Default DefaultRefreshEvery.
	RefreshEvery time.Duration
	// Seed, when set, is the model revision's one-origin-reader rule (the daemon's: a seed Lease,
	// pkg/peer/seed). A chunk every live peer turned away busy reads the origin only while this node
	// holds it (asked at most every RefreshEvery; false: the chunk waits for a slot); every origin read
	// renews it, so it stays this node's exactly while it reads; EndFetch gives it up after a failed
	// fetch. nil: always read.
	Seed Seeder
	// ReleaseAfter, when set, is how long after a published fetch the seed role is given up (see
	// EndFetch); 0: it expires unrenewed.
	ReleaseAfter time.Duration
	// BusyGrace is how long a chunk waits for a slot before it asks OriginGate, counted from the
	// chunk's first try or the last time a peer became warm, whichever is later: slots free within
	// seconds when downloads are short, and a chunk sent to a slow origin then costs more than the
	// wait. Default 0 (ask at once).
	BusyGrace time.Duration
	// BusyWait bounds how long a chunk waits for a busy peer's slot before it reads the origin
	// anyway. Default 10m.
	BusyWait time.Duration
	// MaxPeers bounds the usable peers Refresh tops up to. Default 4.
	MaxPeers int
	// Node is this node's name, sent to peers (peer.HeaderNode) so each counts it as one downloader.
	Node string
	// Token returns the bearer token presented to peers (the projected ServiceAccount token).
	Token func() (string, error)
	// Client makes the peer requests; nil: a client with a 10s response-header timeout.
	Client *http.Client
	// Stall ends a peer request that spent this long waiting on the network while receiving under
	// 64 KiB (bounded.Client: nothing at all, or a trickle); the peer is dropped. Default 10s
	// (config peers.stallTimeout).
	Stall time.Duration
	// OnBytes is told of every byte received, by from (peer.FromPeer or peer.FromOrigin); may be nil.
	OnBytes func(from string, n int64)
	// OnDrop is told of every dropped peer, with the reason; may be nil.
	OnDrop func(peer, reason string)
	Log    *slog.Logger
}

// Seeder names the one node of a fleet that reads the origin for a model revision while no peer can
// serve it; *seed.Lease implements it.
type Seeder interface {
	// Acquire takes the role when nobody holds it (or its holder stopped renewing) and reports whether
	// this node holds it now.
	Acquire(ctx context.Context) (held bool, holder string, err error)
	// Renew keeps the role while this node reads the origin; it does nothing when not held or not due.
	Renew(ctx context.Context) error
	// Release gives the role up, so a node waiting for it takes it at once.
	Release(ctx context.Context) error
}

// Source implements prefetch.Source over peers and an origin.
type Source struct {
	o     Options
	do    bounded.Doer // o.Client under the stall and body bounds
	dmu   sync.Mutex   // held while Discover runs
	found bool
	peers []*member
	rmu   sync.Mutex // held while Refresh runs
	pmu   sync.Mutex // held while partial members are asked for their files (probe)
	// probedAt is when they last were (under pmu).
	probedAt time.Time
	gmu      sync.Mutex // held while Seed.Acquire runs (originOpen)
	// gate and gateAt are Seed.Acquire's last answer and when it was asked (under gmu).
	gate   bool
	gateAt time.Time
	// looked is when the peers were last looked up, addedAt when one was last added during the fetch
	// (under mu).
	looked, addedAt time.Time

	mu      sync.Mutex
	sizes   map[string]int64       // the origin's size of each file asked for
	served  map[rangeKey]served    // who delivered each range, and its CRC
	since   map[rangeKey]time.Time // ranges waiting for a peer that can send them, since when (waitingSince)
	dropped []string
	next    int

	peerBytes, originBytes atomic.Int64
}

type member struct {
	base     string
	host     string
	inflight atomic.Int32
	dead     atomic.Bool
	corrupt  atomic.Bool
	used     atomic.Bool
	// credit guards bytes against corrupt: once a peer proves corrupt, what it sent is taken back
	// from peerBytes once, and nothing it sends after is credited.
	credit sync.Mutex
	bytes  int64 // received from it and credited to peerBytes
	// busyUntil (unix nanoseconds) is when the peer, busy with other downloaders, may be asked again.
	busyUntil atomic.Int64
	// servedAt (unix nanoseconds) is when the peer last sent this fetch a whole range: within
	// peer.ServingWithin it holds a serving slot for this node (peer.HeaderServing).
	servedAt atomic.Int64
	// files, for a partial member (its download still in flight), are the files it verified, as of
	// its last answer (under Source.mu); nil for a whole member, which serves every file.
	files map[string]bool
	// pieces, for a partial member, are the files it holds only parts of, with the verified byte
	// ranges, as of its last answer (under Source.mu): a range inside one is asked of it.
	pieces map[string][][2]int64
	// later holds the files m sends another downloader now (a busy answer for one file), with when
	// to ask again (unix nanoseconds; under Source.mu).
	later map[string]int64
}

type rangeKey struct {
	name string
	off  int64
}

type served struct {
	peer *member // nil: the origin
	crc  uint32
}

var (
	_ prefetch.Source      = (*Source)(nil)
	_ prefetch.MultiSource = (*Source)(nil)
	_ prefetch.FetchEnder  = (*Source)(nil)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// New returns a Source reading from opts.Peers and opts.Origin.
func New(opts Options) *Source {
	if opts.Client == nil {
		opts.Client = peer.NewClient(peer.DefaultHeaderTimeout)
	}
	if opts.Stall <= 0 {
		opts.Stall = 10 * time.Second
	}
	if opts.OnBytes == nil {
		opts.OnBytes = func(string, int64) {}
	}
	if opts.OnDrop == nil {
		opts.OnDrop = func(string, string) {}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.RefreshEvery <= 0 {
		opts.RefreshEvery = DefaultRefreshEvery
	}
	if opts.BusyWait <= 0 {
		opts.BusyWait = 10 * time.Minute
	}
	if opts.MaxPeers <= 0 {
		opts.MaxPeers = 4
	}
	s := &Source{o: opts, sizes: map[string]int64{}, served: map[rangeKey]served{}, since: map[rangeKey]time.Time{},
		// Every peer answer stalls out (docs/security.md, "Bounds on S3 and peer answers").
		do: &bounded.Client{Inner: opts.Client, Stall: opts.Stall}}
	if opts.Discover == nil {
		s.setPeers(opts.Peers)
	}
	return s
}

// releaseTimeout bounds EndFetch's call to the API server: a fetch that ended must not hang on it, and
// a Lease not released expires by itself.
const releaseTimeout = 5 * time.Second

// EndFetch implements prefetch.FetchEnder. A fetch that failed or stopped gives the seed role up at
// once, so a node waiting for it takes it now rather than when it expires. A published one keeps it
// for ReleaseAfter: readiness labels this node warm meanwhile, and the nodes waiting then find it as
// a peer instead of taking the role and reading the whole model from the origin again. Then it gives
// it up all the same: a node that never saw the Lease judges its expiry from its first look (by its
// own clock), so a wave that comes after every warm node left (a scale from zero) would otherwise
// wait a whole Lease duration for a holder that is gone.
func (s *Source) EndFetch(err error) {
	if s.o.Seed == nil {
		return
	}
	if err == nil {
		if s.o.ReleaseAfter > 0 {
			time.AfterFunc(s.o.ReleaseAfter, func() { s.release("after publishing") })
		}
		return
	}
	s.release("the fetch ended unpublished")
}

// release gives the seed role up (bounded by releaseTimeout).
func (s *Source) release(why string) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if rerr := s.o.Seed.Release(ctx); rerr != nil {
		s.o.Log.Warn("could not give the seed role up; it expires by itself", "model", s.o.Model, "why", why, "err", rerr)
	}
}

// String is the origin's: the journal and the published record name the origin, so a download resumes
// whether or not peers are around.
func (s *Source) String() string { return s.o.Origin.String() }

// List implements prefetch.Source (the origin's listing).
func (s *Source) List(ctx context.Context) (prefetch.Listing, error) {
	l, err := s.o.Origin.List(ctx)
	if err == nil {
		s.mu.Lock()
		for _, f := range l.Files {
			s.sizes[f.Key] = f.Size
		}
		s.mu.Unlock()
	}
	return l, err
}

// Head implements prefetch.Source: the origin's HEAD is the file's identity.
func (s *Source) Head(ctx context.Context, name fsroot.Path) (objstore.Object, error) {
	o, err := s.o.Origin.Head(ctx, name)
	if err == nil {
		s.mu.Lock()
		s.sizes[name.String()] = o.Size
		s.mu.Unlock()
	}
	return o, err
}

// Parts implements prefetch.Source (the origin's).
func (s *Source) Parts(ctx context.Context, name fsroot.Path) ([]objstore.Part, error) {
	return s.o.Origin.Parts(ctx, name)
}

// ByteSources implements prefetch.MultiSource.
func (s *Source) ByteSources() prefetch.ByteSources {
	bs := prefetch.ByteSources{PeerBytes: s.peerBytes.Load(), OriginBytes: s.originBytes.Load()}
	s.mu.Lock()
	for _, m := range s.peers {
		if m.used.Load() && !m.corrupt.Load() {
			bs.Peers = append(bs.Peers, m.host)
		}
	}
	bs.Dropped = slices.Clone(s.dropped)
	s.mu.Unlock()
	return bs
}

// Compile-time checks: the engine reports this source's byte split and orders its chunks by holders.
var (
	_ prefetch.MultiSource = (*Source)(nil)
	_ prefetch.Holders     = (*Source)(nil)
)

// partialKnown reports whether this fetch knows a node still downloading, whose list of verified
// files grows by the second.
func (s *Source) partialKnown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.peers {
		if m.files != nil && !m.dead.Load() {
			return true
		}
	}
	return false
}

// Holders implements prefetch.Holders: the live peers that hold bytes [off, off+n) of name now (a
// warm member holds every file; a partial member the files and verified parts it listed at the last
// look) and can send now: not resting after a busy answer (until its Retry-After passes) and sending
// fewer than askableInflight of this fetch's chunks. The picker then starts a file a peer with spare
// capacity can send before one that only busy peers hold, so a wave takes what the nodes ahead of it
// have finished instead of queueing on the one node that has everything (docs/fleet.md).
func (s *Source) Holders(name string, off, n int64) int { return s.holders(name, off, n, true) }

// askableInflight is how many of this fetch's chunks a peer may be sending before the picker stops
// counting it as a holder: two keep its link busy, and the other workers start files that peers with
// spare capacity hold instead of queueing behind it.
const askableInflight = 2

// holders counts the live peers holding the range; askable leaves out those resting after a busy
// answer and those already sending askableInflight chunks of this fetch.
func (s *Source) holders(name string, off, n int64, askable bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UnixNano()
	k := 0
	for _, m := range s.peers {
		if !m.dead.Load() && m.holds(name, off, n) && (!askable || m.askable(name, now) && m.inflight.Load() < askableInflight) {
			k++
		}
	}
	return k
}

// GetRange implements prefetch.Source: the range comes from the least busy live peer, continuing
// from the origin where a peer fails; a range asked for twice comes from the origin and is compared
// with what the peer gave the first time.
func (s *Source) GetRange(ctx context.Context, name fsroot.Path, off, n int64, w io.Writer) (int64, error) {
	if err := s.discover(ctx); err != nil {
		return 0, err
	}
	s.refresh(ctx, s.o.RefreshEvery)
	key := rangeKey{name.String(), off}
	s.mu.Lock()
	prev, again := s.served[key]
	s.mu.Unlock()
	if again {
		crc := crc32.New(castagnoli)
		got, err := s.origin(ctx, name, off, n, io.MultiWriter(w, crc))
		if err == nil && got == n && prev.peer != nil && crc.Sum32() != prev.crc {
			s.drop(prev.peer, peer.DropCorrupt, fmt.Sprintf("%s bytes %d-%d differ from the origin's", name, off, off+n-1))
		}
		return got, err
	}
	crc := crc32.New(castagnoli)
	w = io.MultiWriter(w, crc)
	// Every live peer busy: the chunk waits for a slot unless this node may read the origin.
	got, from, err := s.fromPeers(ctx, name, off, n, w)
	if err != nil {
		return got, err
	}
	if got < n {
		rest, err := s.origin(ctx, name, off+got, n-got, w)
		got += rest
		if err != nil {
			return got, err
		}
		if from != nil {
			from = nil // mixed: a later mismatch cannot be pinned on the peer
		}
	}
	s.mu.Lock()
	s.served[key] = served{peer: from, crc: crc.Sum32()}
	s.mu.Unlock()
	return got, nil
}

// fromPeers reads the range from the least busy usable peer; a busy one sent nothing, and the next
// is asked, as is the next after a partial member that turned out not to hold the file. When every
// live peer is busy or has not verified the file yet it waits for a slot (see busyWait) until it has
// waited BusyGrace (graceOver) and this node holds the seed role, or it has waited BusyWait, counted
// from the range's first try; the seed does not wait for a file no peer holds at all. A download
// that can put the chunk back (prefetch.Deferrable) gets it back (prefetch.ErrDeferred) instead of a
// wait when the peers that hold it turned it away, or after a wait that freed none of them: it takes
// a chunk another node can send meanwhile. It returns the bytes written and the peer that wrote all
// of them (nil if it wrote none or failed); an error only when ctx ends or for a range put back.
func (s *Source) fromPeers(ctx context.Context, name fsroot.Path, off, n int64, w io.Writer) (int64, *member, error) {
	key := rangeKey{name.String(), off}
	start := s.waitingSince(key)
	turnedAway, waited := false, false
	for {
		for m := s.pick(name.String(), off, n); m != nil; m = s.pick(name.String(), off, n) {
			t0 := time.Now()
			got, err := s.fromPeer(ctx, m, name, off, n, w)
			m.inflight.Add(-1)
			s.o.Log.Debug("range from peer", "peer", m.host, "file", name.String(), "off", off, "bytes", got, "secs", time.Since(t0).Seconds(), "err", err)
			if s.busy(m, name.String(), err) || (errors.Is(err, errNotHeld) && s.notHeld(m, name.String())) {
				turnedAway = true
				continue
			}
			s.waited(key)
			if err != nil {
				if ctx.Err() != nil {
					return got, nil, ctx.Err()
				}
				s.drop(m, peer.DropError, err.Error())
				return got, nil, nil
			}
			m.used.Store(true)
			m.servedAt.Store(time.Now().UnixNano())
			return got, m, nil
		}
		if !s.live() || time.Since(start) >= s.o.BusyWait || (s.graceOver(start) && s.originOpen(ctx)) {
			s.waited(key)
			return 0, nil, nil
		}
		// No peer holds the file at all (the others of the wave are behind this node): waiting frees
		// no slot, so the seed reads it now; any other node waits for the seed, as ever.
		if s.holders(name.String(), off, n, false) == 0 && s.originOpen(ctx) {
			s.waited(key)
			return 0, nil, nil
		}
		if (turnedAway || waited) && prefetch.CanDefer(ctx) {
			return 0, nil, prefetch.ErrDeferred
		}
		if err := s.busyWait(ctx); err != nil {
			return 0, nil, err
		}
		waited = true
	}
}

// waitingSince is when range key was first tried and found no peer that could send it, kept while
// it goes back and forth between the download's workers (prefetch.ErrDeferred): the seed's grace and
// BusyWait count from then.
func (s *Source) waitingSince(key rangeKey) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.since[key]; ok {
		return t
	}
	now := time.Now()
	s.since[key] = now
	return now
}

// waited forgets range key's first try: it was sent, or goes to the origin.
func (s *Source) waited(key rangeKey) {
	s.mu.Lock()
	delete(s.since, key)
	s.mu.Unlock()
}

func (s *Source) origin(ctx context.Context, name fsroot.Path, off, n int64, w io.Writer) (int64, error) {
	if s.o.Seed != nil {
		if err := s.o.Seed.Renew(ctx); err != nil {
			s.o.Log.Debug("could not renew the seed role; reading the origin anyway", "model", s.o.Model, "err", err)
		}
	}
	got, err := s.o.Origin.GetRange(ctx, name, off, n, w)
	s.originBytes.Add(got)
	s.o.OnBytes(peer.FromOrigin, got)
	return got, err
}

// errPeer marks a peer's answer that is not the requested range of the origin's file.
var errPeer = errors.New("peer answer refused")

// fromPeer copies the range from peer m into w and returns how many bytes it wrote; on an error the
// bytes written so far are good to keep (the origin continues after them).
func (s *Source) fromPeer(ctx context.Context, m *member, name fsroot.Path, off, n int64, w io.Writer) (int64, error) {
	s.mu.Lock()
	size, ok := s.sizes[name.String()]
	s.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("%w: no origin identity for %s", errPeer, name)
	}
	token, err := s.o.Token()
	if err != nil {
		return 0, fmt.Errorf("peer token: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(bounded.WithBodyLimit(ctx, n), http.MethodGet, peer.WeightsURL(m.base, s.o.Model, s.o.Revision, name.String()), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if s.o.Node != "" {
		req.Header.Set(peer.HeaderNode, s.o.Node)
	}
	req.Header.Set(peer.HeaderServing, strconv.Itoa(s.servingElsewhere(m)))
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	// Bytes as stored: a peer never encodes, and one that does is refused (CheckEncoding).
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := s.do.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := peer.Busy(resp); err != nil {
		return 0, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return 0, fmt.Errorf("%w: %s", errNotHeld, name)
	}
	if resp.StatusCode != http.StatusPartialContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return 0, fmt.Errorf("%w: %s: %s", errPeer, resp.Status, strings.TrimSpace(string(msg)))
	}
	if err := checkRange(resp.Header, off, n, size); err != nil {
		return 0, err
	}
	if err := bounded.CheckEncoding(resp.Header.Get("Content-Encoding")); err != nil {
		return 0, fmt.Errorf("%w: %w", errPeer, err)
	}
	if resp.ContentLength != n {
		return 0, fmt.Errorf("%w: Content-Length %d for a range of %d bytes", errPeer, resp.ContentLength, n)
	}
	var got int64
	buf := make([]byte, 256<<10)
	for got < n {
		k, rerr := resp.Body.Read(buf[:min(int64(len(buf)), n-got)])
		if k > 0 {
			if _, err := w.Write(buf[:k]); err != nil {
				return got, err
			}
			got += int64(k)
			if !s.creditBytes(m, int64(k)) {
				return got, fmt.Errorf("%w: dropped as corrupt while this range was in flight", errPeer)
			}
			s.o.OnBytes(peer.FromPeer, int64(k))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return got, fmt.Errorf("read from peer after %d of %d bytes: %w", got, n, rerr)
		}
	}
	if got < n {
		return got, fmt.Errorf("%w: peer sent %d of %d bytes", errPeer, got, n)
	}
	return got, nil
}

// checkRange refuses an answer that is not exactly bytes off..off+n-1 of a file of the origin's size.
func checkRange(h http.Header, off, n, size int64) error {
	if v := h.Get(peer.HeaderSize); v != strconv.FormatInt(size, 10) {
		return fmt.Errorf("%w: peer holds %q bytes, the origin %d", errPeer, v, size)
	}
	want := fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, size)
	if got := h.Get("Content-Range"); got != want {
		return fmt.Errorf("%w: Content-Range %q, want %q", errPeer, got, want)
	}
	return nil
}
