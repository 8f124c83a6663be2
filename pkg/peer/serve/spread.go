package serve

import (
	"net/http"
	"sync"
	"time"

	"warmd.io/warmd/pkg/peer"
)

// ReasonSpread is the refusal reason of a GET for a weight file whose copy from this node goes to
// another downloader now, or that went out whole already while files sent in fewer copies are asked
// for (503 with Retry-After and peer.HeaderBusyFile; see spread).
const ReasonSpread = "spread"

// spread sends each weight file to one downloader at a time while the upload is used (below). The
// nodes of a wave are right behind the node ahead of them: the files it verified a moment ago are
// the ones every one of them lacks. Were each sent to all who ask, its upload would carry the same
// bytes seven times while the others' uploads idle, and each copy would take seven times as long;
// sent to one, that one verifies it within seconds and serves it in turn, so the copies double per
// hop and this node's upload carries a new file to the next downloader instead (BitTorrent's
// super-seeding).
//
// First copies first: a file this node already sent whole goes to nobody while a downloader asked,
// within askedWithin, for a file it sent in fewer whole copies. Sending one file to one downloader
// at a time is not enough: when that copy ends the next downloader asks this node again; a seed
// (bench-fleet, 8 nodes) carried its first files to three or four nodes in turn and the rest to
// two, so the wave got new files at half its upload or less. The downloaders turned away take the
// file from the node it went to, and this node's upload carries the files nobody else has.
//
// One first copy per downloader while others wait: a downloader that receives the first copy of a
// file from here is refused the first copy of another while a downloader that receives nothing from
// here asked within askedWithin. The files nobody else has then go to as many nodes as ask, so each
// node of the wave has a file of its own to serve; sent to one, they share its link and arrive late
// (a seed in bench-fleet sent 10 of its 16 files to one node, several at once at a share each). The
// rest of a first copy a downloader began goes to it whatever else it receives, and an unfinished
// first copy stays its downloader's for firstIdle after its last request, not spreadIdle: taken over
// meanwhile, the file was finished by nobody for many seconds. The first copy of a file of a
// download still in flight here, and one begun already, takes no serving slot (Handler.send): with
// slots, the seed's two holders would get every file first, and a copy begun before the seed
// published would wait behind them. Such copies are bounded without slots: one per file, and one
// begun per downloader while others wait.
//
// A copy that is not its file's first from here takes only the cap its first copies leave, for
// againWait in all (capped.leftover): the seed's upload is the one the whole wave waits on, and a
// second copy that started while the upload had room must not slow the next file's first copy, nor
// starve (a downloader waiting on it has that chunk from nobody else).
//
// Only while this node's upload is used (the bytes served over the last second reach ¾ of the cap,
// as for overflow): a node whose upload would idle sends a file to whoever asks, so the copies of
// what it holds double faster. Without a cap the rule always holds for a download in flight, and
// never for a published revision (nothing says whether the upload is used, and its nodes are
// warm); a cap above the node's link reads as room, and the rule never holds (peers.uploadLimit
// belongs at or below the link's share). A published revision is spread the same way: the wave
// behind a seed that finished reads from it the files the others have not got yet, and a warm
// node of a big wave sends each of its files to more downloaders before any gets two copies.
//
// A downloader keeps a file while it has requests for it in flight and for spreadIdle after the last
// (a fetch asks for a file's next chunk within milliseconds); another asking meanwhile is
// told to ask again after Retry-After for that file alone, and takes other files from this node or
// the file from the node it went to.
type spread struct {
	idle time.Duration
	now  func() time.Time

	mu     sync.Mutex
	held   map[string]*spreadHolder // by model, revision and file
	copies map[string]*fileCopies   // by model, revision and file: what went out of each
	asks   map[string]time.Time     // by downloader: its last request, for at most maxAsks of them
}

// maxAsks bounds the downloaders whose last request spread remembers: past it, one more counts as
// waiting for nothing (othersWait), and a flood of node names costs only itself.
const maxAsks = 256

// fileCopies is what this node sent of one file, and when it was last asked for.
type fileCopies struct {
	size  int64     // the file's size
	sent  int64     // bytes of it sent to downloaders, all of them together
	asked time.Time // the last request for it
}

// whole is how many whole copies of the file went out.
func (c *fileCopies) whole() int64 { return c.sent / max(c.size, 1) }

// spreadHolder is a file's copy: its downloader, with its requests as a slot counts them.
type spreadHolder struct {
	who string
	// first: the copy is its file's first from here, unfinished; it stays who's for firstIdle.
	first bool
	holder
}

// firstIdle is how long a file's unfinished first copy stays its downloader's after its last
// request: the downloader's workers come back to a file's next chunk after other files' chunks,
// and another downloader that took it over meanwhile leaves the first with a file it cannot finish
// and serve (a seed's first copies went to three downloaders in turn, one file 23 s late).
const firstIdle = 2 * time.Second

// spreadIdle is how long a downloader keeps a file's copy after its last request for it: its chunk
// requests for one file follow each other within milliseconds.
const spreadIdle = 500 * time.Millisecond

func newSpread() *spread {
	return &spread{idle: spreadIdle, now: time.Now, held: map[string]*spreadHolder{}, copies: map[string]*fileCopies{}, asks: map[string]time.Time{}}
}

// askedWithin is how long a request for a file counts as a downloader wanting it (first copies
// first): a downloader turned away for a file asks again within a quarter of it.
const askedWithin = time.Second

// free reports whether take would let who have file (of size bytes) now, and records the ask: the
// file is who's copy, or nobody's and no other file asked for within askedWithin (held or not) went
// out in fewer whole copies (first copies first: a downloader that lacks a file this node sent to
// fewer nodes gets it before a second copy of one already out goes to anyone). A file not yet sent
// whole goes to who unless who receives another first copy from here while a downloader that
// receives nothing asked within askedWithin (one first copy per downloader). first reports that the
// copy takes no serving slot: it is the file's first, and the file's download is in flight here
// (inFlight) or its first copy began already (the seed published meanwhile).
func (s *spread) free(file, who string, size int64, inFlight bool) (ok, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	c, ok := s.copies[file]
	if !ok {
		c = &fileCopies{size: size}
		s.copies[file] = c
	}
	c.asked = now
	s.ask(who, now)
	first = c.whole() == 0 && (inFlight || c.sent > 0)
	h, held := s.held[file]
	if held && !s.over(h, now) {
		return h.who == who, h.who == who && first
	}
	if c.whole() == 0 {
		// The rest of a first copy who began goes to who, whatever else it receives.
		if !(held && h.who == who) && s.holdsFirst(who, now) && s.othersWait(who, now) {
			return false, false
		}
		return true, first
	}
	for k, o := range s.copies {
		if k != file && now.Sub(o.asked) < askedWithin && o.whole() < c.whole() {
			return false, false
		}
	}
	return true, false
}

// ask records who's request at now; at maxAsks, the requests older than askedWithin are forgotten
// first (s.mu is held).
func (s *spread) ask(who string, now time.Time) {
	if _, ok := s.asks[who]; !ok && len(s.asks) >= maxAsks {
		for k, at := range s.asks {
			if now.Sub(at) >= askedWithin {
				delete(s.asks, k)
			}
		}
		if len(s.asks) >= maxAsks {
			return
		}
	}
	s.asks[who] = now
}

// holdsFirst reports whether who receives a first copy from this node now (s.mu is held).
func (s *spread) holdsFirst(who string, now time.Time) bool {
	for _, h := range s.held {
		if h.who == who && h.first && !s.over(h, now) {
			return true
		}
	}
	return false
}

// othersWait reports whether a downloader other than who asked within askedWithin and receives
// nothing from this node now (s.mu is held).
func (s *spread) othersWait(who string, now time.Time) bool {
	receiving := map[string]bool{}
	for _, h := range s.held {
		if !s.over(h, now) {
			receiving[h.who] = true
		}
	}
	for o, at := range s.asks {
		if o != who && now.Sub(at) < askedWithin && !receiving[o] {
			return true
		}
	}
	return false
}

// unheld reports whether nobody holds file's copy now (s.mu is held).
func (s *spread) unheld(file string, now time.Time) bool {
	h, ok := s.held[file]
	return !ok || s.over(h, now)
}

// over reports whether h's copy is over: no request in flight for the idle time.
func (s *spread) over(h *spreadHolder, now time.Time) bool {
	idle := s.idle
	if h.first {
		idle = max(idle, firstIdle)
	}
	return h.active == 0 && now.Sub(h.last) >= idle
}

// take reports whether who may receive file now (it is who's copy, or nobody's, or spare: this
// node's upload has room for a second copy, not counted, the file staying its first downloader's),
// and if so counts the request; the caller calls give when it ends. again reports that the bytes
// are not the file's first copy from here (it went out whole before, or goes to another downloader
// now): they wait for upload the first copies leave (capped.again).
func (s *spread) take(file, who string, spare bool) (ok, again bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	again = s.copies[file] != nil && s.copies[file].whole() > 0
	h, held := s.held[file]
	switch {
	case !held || s.over(h, now):
		s.held[file] = &spreadHolder{who: who, first: !again, holder: holder{active: 1}}
		s.sweep(now)
		return true, again
	case h.who == who:
		h.active++
		return true, again
	}
	return spare, true // a second copy at once, from upload that would idle; the first keeps the file
}

// give ends one of who's requests for file, which sent it n bytes.
func (s *spread) give(file, who string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.copies[file]
	if ok {
		c.sent += n
	}
	if h, held := s.held[file]; held && h.who == who && h.active > 0 {
		h.active--
		h.last = s.now()
		h.first = h.first && ok && c.whole() == 0
	}
}

// sweep forgets files nobody has received for the idle time, and the copies of files nobody asked
// for in copiesKept, so the maps hold at most the files in flight and those of the downloads of
// the last minutes (s.mu is held).
func (s *spread) sweep(now time.Time) {
	if len(s.held) >= 64 {
		for k, h := range s.held {
			if s.over(h, now) {
				delete(s.held, k)
			}
		}
	}
	if len(s.copies) >= 256 {
		for k, c := range s.copies {
			if now.Sub(c.asked) >= copiesKept && s.unheld(k, now) {
				delete(s.copies, k)
			}
		}
	}
}

// copiesKept is how long the copies sent of a file nobody asks for are remembered.
const copiesKept = 10 * time.Minute

// spreadBusy answers a downloader whose file goes to another downloader now: busy for that file
// alone (peer.HeaderBusyFile).
func (h *Handler) spreadBusy(w http.ResponseWriter) {
	w.Header().Set(peer.HeaderBusyFile, "1")
	h.busyWith(w, ReasonSpread, "this file's copy from here goes to another downloader now, or went out already while others have not: read other files here, or this one from a node that has it")
}
