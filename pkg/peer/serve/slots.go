package serve

import (
	"log/slog"
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

// ReasonYield is the refusal reason of a GET from a downloader whose slot here was handed to one
// that holds none anywhere (503 with Retry-After; see slots, "one slot per downloader").
const ReasonYield = "yield"

// yieldWindow is how long a refused downloader that holds no slot anywhere counts as waiting here
// (it asks again after Retry-After, a second), and how long a slot taken from a downloader that
// holds others stays kept for one that holds none.
const yieldWindow = 2 * time.Second

// DefaultSlotIdle is how long a downloader keeps its slot after its last request finished. A fetch
// keeps several chunk requests in flight and asks for the next within milliseconds, so its slot is
// never idle while it runs; a second is enough to bridge a pause and short enough that a finished (or
// failed) fetch hands its slot on at once: the downloaders it turned away ask again after a second.
const DefaultSlotIdle = time.Second

// Overflow: while the downloaders in the slots leave the upload cap under-used, more are taken.
const (
	// overflowFactor bounds the downloaders served at once to this many times the slots.
	overflowFactor = 4
	// overflowBelow is the share of the cap under which the served rate counts as under-used.
	overflowBelow = 0.75
	// overflowEvery is the least time between two admissions past the slots, and the window the
	// served rate is measured over: a downloader admitted less than that ago has not reached its
	// speed yet, so the rate does not show whether the cap is used.
	overflowEvery = time.Second
	// overflowGain: a downloader taken past the slots must have raised the served rate by this factor
	// (measured overflowEvery later) for one more to be taken.
	overflowGain = 1.1
)

// slots limits how many distinct downloaders one node serves at once. Sharing one upload cap among
// every node that asks makes each of them slow, and none finishes (and starts serving in turn) early;
// serving a few at a time lets those finish at the full cap while the others read another peer or the
// origin, so the number of warm nodes doubles per wave instead of creeping up together.
//
// Slots are for a cap the downloaders can fill. When they cannot (each is held back by its own disk
// or link, or by the machine they share in a test), turning the rest away leaves the cap idle and
// makes them wait for nothing; so while the bytes served over the last second stay under three
// quarters of the cap, one more downloader is taken per second, up to overflowFactor times the slots.
// Each must pay for itself: when the last one taken past the slots left the served rate flat (within
// overflowGain either way), this node's own link is what is full (a cap above the link, as on any node whose NIC
// share is below its configured cap), and one more would only split the link further, so no more
// are taken until a downloader leaves. Without a cap nothing says whether it is used, and the slots
// are a hard limit.
//
// One slot per downloader while others wait: a downloader says how many other peers serve it now
// (peer.HeaderServing). When one that holds no slot anywhere is turned away, the next request of a
// holder here that is served elsewhere too is refused (ReasonYield) and its slot is kept for a
// downloader that holds none for yieldWindow: the holder goes on at its other peers, and the node
// that had nothing gets a slot, so no node waits while another reads from K peers at once
// (hack/fleetsim's -one-slot). A downloader that says nothing counts as served nowhere else, so it
// is never asked to yield.
//
// A downloader is identified by the address it connects from and the node name it sends
// (peer.HeaderNode): the token cannot tell nodes apart (every warmd pod presents the same
// ServiceAccount), while a connection's address is one per node in a cluster and the name separates
// nodes behind one address. A downloader's parallel chunk requests share its one slot.
type slots struct {
	max  int // <= 0: no limit
	idle time.Duration
	cap  float64 // the upload cap in bytes per second; 0: none (no overflow)
	now  func() time.Time
	log  *slog.Logger // nil: none

	mu       sync.Mutex
	held     map[string]*holder
	admitted time.Time // the last time a downloader got a slot
	// overRate is the served rate just before the last admission past the slots, overHeld the slots
	// held then: while more than overHeld are held, the next needs overflowGain × overRate.
	overRate float64
	overHeld int
	served   meter
	waiting  time.Time // until then a downloader served nowhere else waits for a slot here
	reserved time.Time // until then a free slot goes only to a downloader served nowhere else
}

type holder struct {
	active int       // requests in flight
	last   time.Time // when the last one finished
}

func newSlots(n int, idle time.Duration, uploadCap int64) *slots {
	if idle <= 0 {
		idle = DefaultSlotIdle
	}
	return &slots{max: n, idle: idle, cap: float64(max(uploadCap, 0)), now: time.Now, held: map[string]*holder{}}
}

// acquire is admit for a downloader that says nothing of other peers.
func (s *slots) acquire(who string) bool { return s.admit(who, 0) == "" }

// admit takes (or shares) who's slot. elsewhere is how many other peers serve who now. It answers ""
// when who is served, else why not: ReasonBusy (every slot held by others and the cap used, or the
// free one kept for a downloader served nowhere else) or ReasonYield (who's slot went to such a one).
func (s *slots) admit(who string, elsewhere int) string {
	if s.max <= 0 {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if h, ok := s.held[who]; ok {
		if elsewhere > 0 && now.Before(s.waiting) {
			delete(s.held, who) // its requests in flight finish; release finds no holder
			s.waiting, s.reserved = time.Time{}, now.Add(yieldWindow)
			return ReasonYield
		}
		h.active++
		return ""
	}
	kept := elsewhere > 0 && now.Before(s.reserved)
	if len(s.held) >= s.max || kept {
		for k, h := range s.held {
			if h.active == 0 && now.Sub(h.last) >= s.idle {
				delete(s.held, k)
			}
		}
		if kept || (len(s.held) >= s.max && !s.underused(now)) {
			if elsewhere == 0 {
				s.waiting = now.Add(yieldWindow)
			}
			return ReasonBusy
		}
	}
	if elsewhere == 0 {
		s.reserved = time.Time{}
	}
	if s.max > 0 && len(s.held) >= s.max {
		s.overRate, s.overHeld = s.served.rate(now), len(s.held)
	}
	s.held[who] = &holder{active: 1}
	s.admitted = now
	if s.log != nil {
		s.log.Debug("downloader takes a serving slot", "who", who, "held", len(s.held), "slots", s.max, "servedMiBps", s.served.rate(now)/(1<<20))
	}
	return ""
}

// underused reports whether one more downloader may be taken past the slots (see slots).
func (s *slots) underused(now time.Time) bool {
	if s.cap <= 0 || len(s.held) >= overflowFactor*s.max || now.Sub(s.admitted) < overflowEvery {
		return false
	}
	r := s.served.rate(now)
	if r >= overflowBelow*s.cap {
		return false
	}
	// The last one taken past the slots, still here, must have changed the rate: a flat rate says the
	// link is full. (One that fell says the downloaders slowed on their side; more may fill the gap.)
	flat := r >= s.overRate/overflowGain && r < overflowGain*s.overRate
	return len(s.held) <= s.overHeld || !flat
}

// measured reports whether the served rate says whether the upload is used: there is a cap (and
// slots) to hold it against.
func (s *slots) measured() bool { return s.max > 0 && s.cap > 0 }

// full reports whether this node's upload is used: the bytes served over the last second reach
// overflowBelow of the cap. Without a cap (or slots) nothing says, and it counts as used.
func (s *slots) full() bool {
	if !s.measured() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served.rate(s.now()) >= overflowBelow*s.cap
}

// release ends one of who's requests; the slot stays who's until it has been idle for s.idle.
func (s *slots) release(who string) {
	if s.max <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[who]; ok && h.active > 0 { // a slot taken by a yield may have a new holder
		h.active--
		h.last = s.now()
	}
}

// sent counts n bytes served (to any downloader) for the overflow rule.
func (s *slots) sent(n int) {
	if s.max <= 0 || s.cap <= 0 {
		return
	}
	s.mu.Lock()
	s.served.add(s.now(), int64(n))
	s.mu.Unlock()
}

// retryAfter is the Retry-After of a busy answer, in whole seconds (at least 1): when an idle slot
// could be free again at the earliest.
func (s *slots) retryAfter() string {
	return strconv.Itoa(max(1, int((s.idle+time.Second-1)/time.Second)))
}

// meter is the bytes served over the last overflowEvery, counted in quarters of it.
type meter struct {
	quarter [4]int64
	at      int64 // the current quarter's number (time since the epoch in quarters)
}

func (m *meter) advance(now time.Time) int64 {
	q := now.UnixNano() / int64(overflowEvery/4)
	n := int64(len(m.quarter))
	if q-m.at >= n {
		m.quarter = [4]int64{}
	} else {
		for i := m.at + 1; i <= q; i++ {
			m.quarter[i%n] = 0
		}
	}
	m.at = max(m.at, q)
	return m.at
}

func (m *meter) add(now time.Time, n int64) {
	q := m.advance(now)
	m.quarter[q%int64(len(m.quarter))] += n
}

// rate is the bytes per second over the three quarters before the current one and the part of the
// current one that has passed: dividing by the whole window would read a downloader at the cap as
// under it at the start of every quarter.
func (m *meter) rate(now time.Time) float64 {
	m.advance(now)
	var sum int64
	for _, v := range m.quarter {
		sum += v
	}
	q := overflowEvery / 4
	span := 3*q + time.Duration(now.UnixNano()%int64(q))
	return float64(sum) / span.Seconds()
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
func (h *Handler) busy(w http.ResponseWriter, reason string) {
	msg := "serving slots busy: read another peer or the origin"
	if reason == ReasonYield {
		msg = "this slot goes to a downloader that holds none: read your other peers"
	}
	h.busyWith(w, reason, msg)
}

// busyWith is busy's answer with its own text.
func (h *Handler) busyWith(w http.ResponseWriter, reason, msg string) {
	w.Header().Set("Retry-After", h.slots.retryAfter())
	h.refuse(w, http.StatusServiceUnavailable, reason, msg)
}

// servingElsewhere is how many other peers serve the downloader now, as it says
// (peer.HeaderServing); 0 when it does not say or says something else than a small count.
func servingElsewhere(r *http.Request) int {
	n, err := strconv.Atoi(r.Header.Get(peer.HeaderServing))
	if err != nil || n < 0 || n > 1024 {
		return 0
	}
	return n
}
