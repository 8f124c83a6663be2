package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"warmd.io/warmd/pkg/bounded"
	"warmd.io/warmd/pkg/peer"
)

// Peers whose download of the revision is still in flight (partial members): a node of the same
// wave that verified some files already serves them (peer.WeightFilesPath), so a fetch reads each of
// those files from it instead of waiting for the whole revision or reading the origin beside it. A
// partial member is asked only for the files it named, each checked against the origin's listing;
// one that has not verified a file yet is waited for like a busy peer (the seed rule holds: one node
// of a group reads the origin at a time), and its list is asked again at every look.

// probeTimeout bounds one served-files answer: a peer that cannot say which files it holds within it
// is no help to this fetch.
const probeTimeout = 3 * time.Second

// maxPartialProbe bounds the nodes one look asks which files they hold (besides the partial members
// already known): a wave of hundreds of cold nodes costs each fetch a handful of small requests.
const maxPartialProbe = 8

// maxPartial bounds the partial members one fetch keeps (at least Options.MaxPeers), each asked its
// list every second. Not MaxPeers alone: the first nodes a fetch finds with a file are those of the
// first second, and a node of the wave that verified many files since must still be found (in an
// 8-node wave capped at 4, followers never learned of the node that ran ahead, and queued on the
// seed instead).
const maxPartial = 16

// errNotHeld marks a peer's 404: it does not hold the file (a partial member that has not verified it,
// or lost it when its download failed).
var errNotHeld = errors.New("peer does not hold the file")

// probed is one peer's served-files answer: whole (published there), files (verified so far), or err.
type probed struct {
	base   string
	whole  bool
	files  map[string]bool       // nil with a 404
	pieces map[string][][2]int64 // partly verified files: their verified byte ranges
	err    error
}

// probe asks the partial members and up to maxPartialProbe new candidates (Options.Partial) which
// files they hold, when the last ask is at least every old, and records the answers; it reports
// whether any partial member holds a file now. A warm fetch (MaxPeers whole peers usable) does not
// ask.
func (s *Source) probe(ctx context.Context, every time.Duration) bool {
	if s.o.Partial == nil {
		return false
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if time.Since(s.probedAt) < every {
		return s.record(nil)
	}
	s.probedAt = time.Now()
	s.mu.Lock()
	whole, known := 0, map[string]bool{}
	var bases []string
	for _, m := range s.peers {
		known[m.base] = true
		switch {
		case m.dead.Load():
		case m.files == nil:
			whole++
		default:
			bases = append(bases, m.base)
		}
	}
	s.mu.Unlock()
	if whole >= s.o.MaxPeers {
		return false
	}
	cands, err := s.o.Partial(ctx)
	if err != nil {
		s.o.Log.Debug("looking up nodes still downloading failed", "model", s.o.Model, "err", err)
	}
	for added := 0; len(cands) > 0 && added < maxPartialProbe; cands = cands[1:] {
		if b := strings.TrimSuffix(cands[0], "/"); !known[b] {
			bases = append(bases, b)
			known[b] = true
			added++
		}
	}
	answers := make([]probed, len(bases))
	var wg sync.WaitGroup
	for i, b := range bases {
		wg.Go(func() { answers[i] = s.askFiles(ctx, b) })
	}
	wg.Wait()
	return s.record(answers)
}

// record applies probe answers: a member's file list is replaced by its answer (a 404 empties it, an
// error drops it), a new node joins whole when published there, or partial when it holds a file and
// fewer than maxPartial (or MaxPeers, if more) partial members are known. A member that holds more
// files than before counts as a peer added (graceOver: the wave makes progress).
func (s *Source) record(answers []probed) bool {
	var failed []*member
	var joined []string
	s.mu.Lock()
	partial := 0
	for _, m := range s.peers {
		if !m.dead.Load() && m.files != nil {
			partial++
		}
	}
	grew := false
	for _, a := range answers {
		m := s.memberLocked(a.base)
		switch {
		case m != nil && m.dead.Load():
		case m != nil && a.err != nil:
			failed = append(failed, m)
		case m != nil && a.whole:
			grew = grew || m.files != nil
			m.files = nil
		case m != nil:
			if a.files == nil {
				a.files = map[string]bool{}
			}
			grew = grew || len(a.files) > len(m.files) || spanBytes(a.pieces) > spanBytes(m.pieces)
			m.files, m.pieces = a.files, a.pieces
		case a.err != nil || (!a.whole && ((len(a.files) == 0 && len(a.pieces) == 0) || partial >= max(s.o.MaxPeers, maxPartial))):
		default:
			m = s.addMemberLocked(a.base)
			if !a.whole {
				m.files, m.pieces = a.files, a.pieces
				partial++
			}
			joined = append(joined, m.host)
			grew = true
		}
	}
	if grew {
		s.addedAt = time.Now()
	}
	holds := false
	for _, m := range s.peers {
		holds = holds || (!m.dead.Load() && (len(m.files) > 0 || len(m.pieces) > 0))
	}
	s.mu.Unlock()
	if len(joined) > 0 {
		s.o.Log.Info("nodes still downloading serve files they verified: this download reads them too", "model", s.o.Model, "added", joined)
	}
	for _, m := range failed {
		s.drop(m, peer.DropError, "its list of served files could not be read")
	}
	return holds
}

// askFiles asks the peer at base which files of the revision it serves now. Every name is kept only
// when the origin listed it; the answer is bounded in time, bytes and names.
func (s *Source) askFiles(ctx context.Context, base string) probed {
	p := probed{base: base}
	token, err := s.o.Token()
	if err != nil {
		p.err = fmt.Errorf("peer token: %w", err)
		return p
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(bounded.WithBodyLimit(ctx, peer.MaxWeightFilesBytes), http.MethodGet,
		peer.WeightFilesURL(base, s.o.Model, s.o.Revision), nil)
	if err != nil {
		p.err = err
		return p
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if s.o.Node != "" {
		req.Header.Set(peer.HeaderNode, s.o.Node)
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := s.do.Do(req)
	if err != nil {
		p.err = err
		return p
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return p
	case resp.StatusCode != http.StatusOK:
		p.err = fmt.Errorf("%w: served files: %s", errPeer, resp.Status)
		return p
	}
	if err := bounded.CheckEncoding(resp.Header.Get("Content-Encoding")); err != nil {
		p.err = fmt.Errorf("%w: %w", errPeer, err)
		return p
	}
	var wf peer.WeightFiles
	if err := json.NewDecoder(resp.Body).Decode(&wf); err != nil {
		p.err = fmt.Errorf("%w: served files: %w", errPeer, err)
		return p
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if len(wf.Files) > peer.MaxWeightFiles {
		p.err = fmt.Errorf("%w: served files: %d names, more than %d", errPeer, len(wf.Files), peer.MaxWeightFiles)
		return p
	}
	if wf.Complete {
		p.whole = true
		return p
	}
	p.files = map[string]bool{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range wf.Files {
		if _, ok := s.sizes[f]; ok {
			p.files[f] = true
		}
	}
	bad := 0
	for f, spans := range wf.Pieces {
		size, ok := s.sizes[f]
		switch {
		case !ok || p.files[f]:
		case !validSpans(spans, size):
			bad++
		default:
			if p.pieces == nil {
				p.pieces = map[string][][2]int64{}
			}
			p.pieces[f] = spans
		}
	}
	if bad > 0 {
		s.o.Log.Debug("peer listed verified parts that are not ranges of the origin's files; those files are not asked of it", "peer", base, "files", bad)
	}
	return p
}

// validSpans reports whether spans are byte ranges [start, end) of a file of size bytes: at most
// peer.MaxPieceSpans, each non-empty, sorted and disjoint.
func validSpans(spans [][2]int64, size int64) bool {
	if len(spans) == 0 || len(spans) > peer.MaxPieceSpans {
		return false
	}
	var end int64
	for i, sp := range spans {
		if sp[0] < 0 || sp[0] >= sp[1] || sp[1] > size || (i > 0 && sp[0] <= end) {
			return false
		}
		end = sp[1]
	}
	return true
}

// spanBytes is how many bytes pieces hold in all.
func spanBytes(pieces map[string][][2]int64) int64 {
	var n int64
	for _, spans := range pieces {
		for _, sp := range spans {
			n += sp[1] - sp[0]
		}
	}
	return n
}

// notHeld forgets name on partial member m, which answered 404 for it, and reports whether m is
// partial (a whole member's 404 is a failure).
func (s *Source) notHeld(m *member, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.files == nil {
		return false
	}
	delete(m.files, name)
	delete(m.pieces, name)
	return true
}
