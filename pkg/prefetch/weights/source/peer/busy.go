package peer

import (
	"context"
	"errors"
	"slices"
	"time"

	"warmd.io/warmd/pkg/peer"
)

// DefaultRefreshEvery is how often a running fetch looks its warm peers up again by default: a node
// that finished meanwhile starts serving within seconds, and a fetch of thousands of chunks costs the
// API server one list per interval, not one per chunk.
const DefaultRefreshEvery = 5 * time.Second

// waitingRefreshEvery is how often a fetch whose every peer is busy looks them up again: a chunk is
// waiting, and a node that just became warm has free slots. A list from the API server's watch cache
// per waiting fetch per second is cheap next to a chunk that waits seconds longer.
const waitingRefreshEvery = time.Second

// fileBusyRest bounds how long a file busy at one peer rests there (peer.HeaderBusyFile): a
// chunk of a file sent at link rate takes a second, and a worker that waits a whole Retry-After
// after every such answer idles most of the time while its file's copies double.
const fileBusyRest = 250 * time.Millisecond

// busy reports whether err is m's busy answer for file name, and if so rests m until its
// Retry-After: it is not dropped, and this fetch asks it again afterwards. When only that file is
// busy there (its copy goes to another downloader now, peer.HeaderBusyFile), only the file rests:
// m is asked for other files meanwhile.
func (s *Source) busy(m *member, name string, err error) bool {
	var b *peer.BusyError
	if !errors.As(err, &b) {
		return false
	}
	if b.File {
		// The copy that holds the file there ends within a second or two, and the file's other holders
		// are asked meanwhile: asked again soon, not after a whole Retry-After.
		rest := min(b.After, fileBusyRest)
		s.mu.Lock()
		if m.later == nil {
			m.later = map[string]int64{}
		}
		m.later[name] = time.Now().Add(rest).UnixNano()
		s.mu.Unlock()
		s.o.Log.Debug("peer sends this file to another downloader now; asking others", "model", s.o.Model, "peer", m.host, "file", name, "retry", rest)
		return true
	}
	m.busyUntil.Store(time.Now().Add(b.After).UnixNano())
	s.o.Log.Debug("peer busy with other downloaders; its chunk goes elsewhere", "model", s.o.Model, "peer", m.host, "retry", b.After)
	return true
}

// refresh looks the warm peers up again when the last look is older than every, and adds peers this
// fetch does not know while fewer than MaxPeers usable ones remain; then it asks the nodes still
// downloading which files they verified (probe), and asks those again every second between looks.
// One chunk worker does it; the others carry on with the peers they have.
func (s *Source) refresh(ctx context.Context, every time.Duration) {
	if (s.o.Refresh == nil && s.o.Partial == nil) || !s.rmu.TryLock() {
		return
	}
	defer s.rmu.Unlock()
	s.mu.Lock()
	due := time.Since(s.looked) >= every
	s.mu.Unlock()
	if due {
		s.topUp(ctx)
		s.probe(ctx, 0)
	} else if s.partialKnown() {
		// The lists of nodes still downloading, every second: which files they verified is what the
		// rarest-first order (prefetch.Holders) reads.
		s.probe(ctx, waitingRefreshEvery)
	}
}

// topUp adds the warm peers Refresh finds that this fetch does not use yet (a partial member among
// them now serves every file).
func (s *Source) topUp(ctx context.Context) {
	var bases []string
	var err error
	if s.o.Refresh != nil {
		bases, err = s.o.Refresh(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.looked = time.Now()
	if err != nil {
		s.o.Log.Debug("looking up warm peers again failed; keeping this fetch's peers", "model", s.o.Model, "err", err)
		return
	}
	usable := 0
	now := time.Now().UnixNano()
	for _, m := range s.peers {
		if !m.dead.Load() && m.busyUntil.Load() <= now && m.files == nil {
			usable++
		}
	}
	if added := s.addLocked(bases, s.o.MaxPeers-usable); len(added) > 0 {
		s.addedAt = time.Now()
		s.o.Log.Info("more peers warm: this download reads them too", "model", s.o.Model, "added", added)
	}
}

// live reports whether any peer of this fetch is not dropped (busy ones included, and partial ones,
// which may verify the file a chunk waits for).
func (s *Source) live() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.peers, func(m *member) bool { return !m.dead.Load() })
}

// originOpen reports whether this node holds the seed role (always, without a Seeder), asked again
// when the last answer is older than RefreshEvery; an error opens it (a fetch must not hang on the API
// server).
func (s *Source) originOpen(ctx context.Context) bool {
	if s.o.Seed == nil {
		return true
	}
	s.gmu.Lock()
	defer s.gmu.Unlock()
	if !s.gateAt.IsZero() && time.Since(s.gateAt) < s.o.RefreshEvery {
		return s.gate
	}
	open, holder, err := s.o.Seed.Acquire(ctx)
	if err != nil {
		s.o.Log.Debug("seed role unknown; reading the origin", "model", s.o.Model, "err", err)
		open = true
	}
	if open != s.gate || s.gateAt.IsZero() {
		s.o.Log.Debug("may chunks busy peers turned away read the origin", "model", s.o.Model, "open", open, "seed", holder)
	}
	s.gate, s.gateAt = open, time.Now()
	return open
}

// graceOver reports whether a chunk that has waited for a slot since start has waited BusyGrace:
// counted from the later of start and the last time a peer was added, since a peer that became warm
// meanwhile shows the group is making progress and a slot is likely to free soon.
func (s *Source) graceOver(start time.Time) bool {
	s.mu.Lock()
	from := start
	if s.addedAt.After(from) {
		from = s.addedAt
	}
	s.mu.Unlock()
	return time.Since(from) >= s.o.BusyGrace
}

// busyWait sleeps until the first busy peer may be asked again (at most waitingRefreshEvery, so peers
// that became warm meanwhile are found), then looks the peers up again if due.
func (s *Source) busyWait(ctx context.Context) error {
	wait := min(s.o.RefreshEvery, waitingRefreshEvery)
	now := time.Now().UnixNano()
	s.mu.Lock()
	for _, m := range s.peers {
		if until := m.busyUntil.Load(); !m.dead.Load() && until > now {
			wait = min(wait, time.Duration(until-now))
		}
		for _, until := range m.later {
			if !m.dead.Load() && until > now {
				wait = min(wait, time.Duration(until-now))
			}
		}
	}
	s.mu.Unlock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(max(wait, 50*time.Millisecond)):
	}
	s.refresh(ctx, min(s.o.RefreshEvery, waitingRefreshEvery))
	return nil
}
