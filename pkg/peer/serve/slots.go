package serve

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"warmd.io/warmd/pkg/peer"
)

// ReasonBusy is the refusal reason of a GET turned away because every serving slot is held by other
// downloaders (503 with Retry-After).
const ReasonBusy = "busy"

// DefaultSlotIdle is how long a downloader keeps its slot after its last request finished. A fetch
// asks for its next chunk within milliseconds of the last one, so a few seconds is enough to keep an
// active downloader's slot and short enough that a finished (or failed) fetch frees it quickly.
const DefaultSlotIdle = 3 * time.Second

// slots limits how many distinct downloaders one node serves at once. Sharing one upload cap among
// every node that asks makes each of them slow, and none finishes (and starts serving in turn) early;
// serving a few at a time lets those finish at the full cap while the others read another peer or the
// origin, so the number of warm nodes doubles per wave instead of creeping up together.
//
// A downloader is identified by the address it connects from and the node name it sends
// (peer.HeaderNode): the token cannot tell nodes apart (every warmd pod presents the same
// ServiceAccount), while a connection's address is one per node in a cluster and the name separates
// nodes behind one address. A downloader's parallel chunk requests share its one slot.
type slots struct {
	max  int // <= 0: no limit
	idle time.Duration
	now  func() time.Time

	mu   sync.Mutex
	held map[string]*holder
}

type holder struct {
	active int       // requests in flight
	last   time.Time // when the last one finished
}

func newSlots(max int, idle time.Duration) *slots {
	if idle <= 0 {
		idle = DefaultSlotIdle
	}
	return &slots{max: max, idle: idle, now: time.Now, held: map[string]*holder{}}
}

// acquire takes (or shares) who's slot; false when every slot is held by others.
func (s *slots) acquire(who string) bool {
	if s.max <= 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[who]; ok {
		h.active++
		return true
	}
	if len(s.held) >= s.max {
		now := s.now()
		for k, h := range s.held {
			if h.active == 0 && now.Sub(h.last) >= s.idle {
				delete(s.held, k)
			}
		}
		if len(s.held) >= s.max {
			return false
		}
	}
	s.held[who] = &holder{active: 1}
	return true
}

// release ends one of who's requests; the slot stays who's until it has been idle for s.idle.
func (s *slots) release(who string) {
	if s.max <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[who]; ok {
		h.active--
		h.last = s.now()
	}
}

// retryAfter is the Retry-After of a busy answer, in whole seconds (at least 1): when an idle slot
// could be free again at the earliest.
func (s *slots) retryAfter() string {
	return strconv.Itoa(max(1, int((s.idle+time.Second-1)/time.Second)))
}

// downloader names the requesting node: its address and the name it sends, bounded.
func downloader(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	name := r.Header.Get(peer.HeaderNode)
	if len(name) > 253 { // a Node name is a DNS subdomain
		name = name[:253]
	}
	return host + "/" + name
}

// busy answers a downloader that found no free slot: 503 with Retry-After, counted; the fetcher
// takes the chunk elsewhere and asks again after Retry-After, without counting this node as failed.
func (h *Handler) busy(w http.ResponseWriter) {
	w.Header().Set("Retry-After", h.slots.retryAfter())
	h.refuse(w, http.StatusServiceUnavailable, ReasonBusy, "serving slots busy: read another peer or the origin")
}
