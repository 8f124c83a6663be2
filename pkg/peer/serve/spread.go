package serve

import (
	"net/http"
	"sync"
	"time"

	"warmd.io/warmd/pkg/peer"
)

// ReasonSpread is the refusal reason of a GET for a file of a download in flight whose copy from
// this node goes to another downloader now (503 with Retry-After and peer.HeaderBusyFile; see
// spread).
const ReasonSpread = "spread"

// spread sends each file of a download in flight to one downloader at a time. The nodes of a wave
// are right behind the node ahead of them: the files it verified a moment ago are the ones every
// one of them lacks. Were each sent to all who ask, its upload would carry the same bytes seven
// times while the others' uploads idle, and each copy would take seven times as long; sent to one,
// that one verifies it within seconds and serves it in turn, so the copies double per hop and this
// node's upload carries a new file to the next downloader instead (BitTorrent's super-seeding).
// A published revision is served to every slot holder as before: its nodes hold every file, and
// the downloaders spread over them by rarest first.
//
// Only while this node's upload is used (the bytes served over the last second reach ¾ of the cap,
// as for overflow): a node whose upload would idle sends a file to whoever asks, so the copies of
// what it holds double faster. Without a cap the rule always holds; a cap above the node's link
// reads as room, and the rule never holds (peers.uploadLimit belongs at or below the link's share).
//
// A downloader keeps a file while it has requests for it in flight and for spreadIdle after the last
// (a fetch asks for a file's next chunk within milliseconds); another asking meanwhile is
// told to ask again after Retry-After for that file alone, and takes other files from this node or
// the file from the node it went to.
type spread struct {
	idle time.Duration
	now  func() time.Time

	mu   sync.Mutex
	held map[string]*spreadHolder // by model, revision and file
}

// spreadHolder is a file's copy: its downloader, with its requests as a slot counts them.
type spreadHolder struct {
	who string
	holder
}

// spreadIdle is how long a downloader keeps a file's copy after its last request for it: its chunk
// requests for one file follow each other within milliseconds.
const spreadIdle = 500 * time.Millisecond

func newSpread() *spread {
	return &spread{idle: spreadIdle, now: time.Now, held: map[string]*spreadHolder{}}
}

// free reports whether take would let who have file now.
func (s *spread) free(file, who string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[file]
	return !ok || h.who == who || s.over(h, s.now())
}

// over reports whether h's copy is over: no request in flight for the idle time.
func (s *spread) over(h *spreadHolder, now time.Time) bool {
	return h.active == 0 && now.Sub(h.last) >= s.idle
}

// take reports whether who may receive file now (it is who's copy, or nobody's, or spare: this
// node's upload has room for a second copy, not counted, the file staying its first downloader's),
// and if so counts the request; the caller calls give when it ends.
func (s *spread) take(file, who string, spare bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	h, ok := s.held[file]
	switch {
	case !ok || s.over(h, now):
		s.held[file] = &spreadHolder{who: who, holder: holder{active: 1}}
		s.sweep(now)
		return true
	case h.who == who:
		h.active++
		return true
	}
	return spare // a second copy at once, from upload that would idle; the first keeps the file
}

// give ends one of who's requests for file.
func (s *spread) give(file, who string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[file]; ok && h.who == who && h.active > 0 {
		h.active--
		h.last = s.now()
	}
}

// sweep forgets files nobody has received for the idle time, so the map holds at most the files in
// flight (s.mu is held).
func (s *spread) sweep(now time.Time) {
	if len(s.held) < 64 {
		return
	}
	for k, h := range s.held {
		if s.over(h, now) {
			delete(s.held, k)
		}
	}
}

// spreadBusy answers a downloader whose file goes to another downloader now: busy for that file
// alone (peer.HeaderBusyFile).
func (h *Handler) spreadBusy(w http.ResponseWriter) {
	w.Header().Set(peer.HeaderBusyFile, "1")
	h.busyWith(w, ReasonSpread, "this file's copy from here goes to another downloader now: read other files here, or this one from that downloader once it has it")
}
