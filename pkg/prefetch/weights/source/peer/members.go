package peer

import (
	"context"
	"math"
	"net/url"
	"strings"
	"time"

	"warmd.io/warmd/pkg/peer"
)

// A fetch's peers: found once (discover), topped up during the fetch (refresh, in busy.go), picked per
// chunk, and dropped when they fail.

// setPeers records the peers found at the first chunk (or given in Options.Peers).
func (s *Source) setPeers(bases []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.found, s.looked = true, time.Now()
	s.addLocked(bases, len(bases))
}

// addLocked adds up to n of bases that are not peers of this fetch yet (dropped ones included, so a
// dropped peer stays dropped); it returns the added ones.
func (s *Source) addLocked(bases []string, n int) []string {
	var added []string
	for _, b := range bases {
		if len(added) >= n {
			break
		}
		b = strings.TrimSuffix(b, "/")
		if m := s.memberLocked(b); m != nil {
			if m.files != nil && !m.dead.Load() { // partial until now: warm since, it serves every file
				m.files = nil
				added = append(added, b)
			}
			continue
		}
		s.addMemberLocked(b)
		added = append(added, b)
	}
	return added
}

// memberLocked returns the member at base, nil when base is not a peer of this fetch.
func (s *Source) memberLocked(base string) *member {
	for _, m := range s.peers {
		if m.base == base {
			return m
		}
	}
	return nil
}

// addMemberLocked adds base as a whole member (it serves every file of the revision).
func (s *Source) addMemberLocked(base string) *member {
	host := base
	if u, err := url.Parse(base); err == nil {
		host = u.Host
	}
	m := &member{base: base, host: host}
	s.peers = append(s.peers, m)
	return m
}

// discover runs Discover once, at the first GetRange; the other chunk workers wait for it.
func (s *Source) discover(ctx context.Context) error {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	s.mu.Lock()
	found := s.found
	s.mu.Unlock()
	if found {
		return nil
	}
	peers, err := s.o.Discover(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil { // the origin alone then
		s.o.Log.Warn("no peers for this download; reading the origin", "model", s.o.Model, "err", err)
	}
	if len(peers) > 0 {
		s.o.Log.Info("downloading with peers", "model", s.o.Model, "peers", peers)
	}
	s.setPeers(peers)
	s.probe(ctx, time.Second) // nodes of the same wave that verified files already (partial.go)
	return nil
}

// pick returns the live peer holding bytes [off, off+n) of name with the fewest requests in flight,
// of those the one holding the fewest files (wanted; ties in turn), its count raised; nil when every
// peer is dropped, busy (for every file or this one) or (partial) without them.
func (s *Source) pick(name string, off, n int64) *member {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *member
	now := time.Now().UnixNano()
	for i := range s.peers {
		m := s.peers[(s.next+i)%len(s.peers)]
		if m.dead.Load() || !m.askable(name, now) || !m.holds(name, off, n) {
			continue
		}
		if best == nil || m.inflight.Load() < best.inflight.Load() ||
			(m.inflight.Load() == best.inflight.Load() && m.wanted() < best.wanted()) {
			best = m
		}
	}
	if best != nil {
		best.inflight.Add(1)
		s.next++
	}
	return best
}

// wanted ranks how many downloaders m's files draw (under s.mu): a partial member by the files and
// parts it verified, a whole member above any. Of two holders equally busy with this fetch, the
// one holding fewer files is asked: the node holding everything (the seed, a warm node) is the one
// every downloader of the wave can use, and its upload is best kept for the files only it holds.
func (m *member) wanted() int {
	if m.files == nil {
		return math.MaxInt
	}
	return len(m.files) + len(m.pieces)
}

// askable reports whether m may be asked for file name at now (unix nanoseconds): not resting after
// a busy answer, for every file or for this one (under s.mu).
func (m *member) askable(name string, now int64) bool {
	return m.busyUntil.Load() <= now && m.later[name] <= now
}

// holds reports whether m holds bytes [off, off+n) of name, as far as this fetch knows (under s.mu).
func (m *member) holds(name string, off, n int64) bool {
	return m.files == nil || m.files[name] || peer.Covers(m.pieces[name], off, off+n)
}

// servingElsewhere is how many peers other than m serve this fetch now: they sent it a whole range
// within peer.ServingWithin and are not dropped. m hands its slot to a node served nowhere when this
// is above zero (peer.HeaderServing).
func (s *Source) servingElsewhere(m *member) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	since := time.Now().Add(-peer.ServingWithin).UnixNano()
	n := 0
	for _, o := range s.peers {
		if o != m && !o.dead.Load() && o.servedAt.Load() > since {
			n++
		}
	}
	return n
}

// creditBytes counts n bytes received from m, unless m proved corrupt (then it reports false and
// counts nothing: its bytes are not what the download keeps).
func (s *Source) creditBytes(m *member, n int64) bool {
	m.credit.Lock()
	defer m.credit.Unlock()
	if m.corrupt.Load() {
		return false
	}
	m.bytes += n
	s.peerBytes.Add(n)
	return true
}

// takeBack marks m corrupt and dead and takes what it was credited back from peerBytes (what it sent
// is not what the download kept: the origin serves it again); false when m was already corrupt.
func (s *Source) takeBack(m *member) bool {
	m.credit.Lock()
	defer m.credit.Unlock()
	if m.corrupt.Swap(true) {
		return false
	}
	m.dead.Store(true)
	s.peerBytes.Add(-m.bytes)
	return true
}

func (s *Source) drop(m *member, reason, why string) {
	if reason == peer.DropCorrupt {
		if !s.takeBack(m) {
			return // counted once per peer
		}
	} else if m.dead.Swap(true) {
		return
	}
	s.mu.Lock()
	s.dropped = append(s.dropped, m.host+": "+reason)
	s.mu.Unlock()
	s.o.OnDrop(m.host, reason)
	s.o.Log.Warn("peer dropped from this download; the origin takes its chunks", "model", s.o.Model, "peer", m.host, "reason", reason, "why", why)
}
