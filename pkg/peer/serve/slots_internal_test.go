package serve

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"warmd.io/warmd/pkg/peer"
)

// A downloader's parallel requests share one slot; another downloader gets one only when a slot is
// free or its holder has been idle for the idle time.
func TestSlots(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newSlots(1, 3*time.Second, 0)
	s.now = func() time.Time { return now }
	if !s.acquire("a") || !s.acquire("a") {
		t.Fatal("a's parallel requests refused")
	}
	if s.acquire("b") {
		t.Fatal("b took a slot held by a")
	}
	s.release("a")
	now = now.Add(time.Minute)
	if s.acquire("b") {
		t.Fatal("b took the slot while a still has a request in flight (no cap: no overflow)")
	}
	s.release("a")
	now = now.Add(2 * time.Second)
	if s.acquire("b") {
		t.Fatal("b took the slot 2s after a's last request (idle time 3s)")
	}
	now = now.Add(time.Second)
	if !s.acquire("b") {
		t.Fatal("b refused after a was idle for the idle time")
	}
	if s.acquire("a") {
		t.Fatal("a took the slot b holds")
	}
	if got := s.retryAfter(); got != "3" {
		t.Errorf("Retry-After %q, want 3", got)
	}
	if got := newSlots(1, 0, 0).retryAfter(); got != "1" {
		t.Errorf("default Retry-After %q, want 1", got)
	}
	if u := newSlots(0, 0, 0); !u.acquire("a") || !u.acquire("b") {
		t.Error("no limit refused a downloader")
	}
}

// Past its slots a node takes one more downloader per second while the bytes it served over the last
// second are under three quarters of its cap, up to four times the slots; a cap in use, or an
// admission less than a second old, keeps the others out.
func TestSlotsOverflow(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newSlots(1, time.Second, 1000) // 1000 B/s cap: overflow below 750 B/s
	s.now = func() time.Time { return now }
	if !s.acquire("a") {
		t.Fatal("a refused a free slot")
	}
	if s.acquire("b") {
		t.Fatal("b taken past the slots while a was admitted just now (its speed not known yet)")
	}
	// a fills the cap: 250 B per quarter second for two seconds.
	for range 8 {
		now = now.Add(250 * time.Millisecond)
		s.sent(250)
	}
	if s.acquire("b") {
		t.Fatalf("b taken past the slots while a uses the cap (%.0f B/s of 1000)", s.served.rate(now))
	}
	// a slows to 500 B/s (held back by its own disk): the cap is under-used.
	for range 4 {
		now = now.Add(250 * time.Millisecond)
		s.sent(125)
	}
	if !s.acquire("b") {
		t.Fatalf("b refused while the cap is under-used (%.0f B/s of 1000)", s.served.rate(now))
	}
	if s.acquire("c") {
		t.Fatal("c taken less than a second after b")
	}
	now = now.Add(time.Second)
	if !s.acquire("c") {
		t.Fatal("c refused a second after b with nothing served")
	}
	if s.acquire("d") {
		t.Fatal("d taken in the same instant as c")
	}
	now = now.Add(time.Second)
	if !s.acquire("d") {
		t.Fatal("d refused a second after c with nothing served")
	}
	now = now.Add(time.Second)
	if s.acquire("e") {
		t.Fatal("e taken past four times the slots (a, b, c, d held)")
	}
	// A long silence forgets what was served.
	s.sent(10_000)
	if s.served.rate(now) < 750 {
		t.Fatal("a burst just now not counted")
	}
	now = now.Add(time.Minute)
	if got := s.served.rate(now); got != 0 {
		t.Errorf("rate a minute after the last byte: %.0f B/s, want 0", got)
	}
}

// The meter reads a steady rate as that rate at every point of a quarter, not less at its start.
func TestMeterSteadyRate(t *testing.T) {
	var m meter
	now := time.Unix(1000, 0)
	for i := range 60 { // 100 bytes every 50 ms: 2000 B/s
		now = now.Add(50 * time.Millisecond)
		m.add(now, 100)
		if i < 25 {
			continue // the first window is still filling
		}
		if got := m.rate(now); got < 1800 || got > 2200 {
			t.Fatalf("after %d sends: %.0f B/s, want about 2000", i+1, got)
		}
	}
}

// One slot per downloader while others wait: when a downloader served nowhere else is turned away,
// the next request of a holder served elsewhere too is refused as a yield, and the freed slot is
// kept for a downloader served nowhere (not for one served elsewhere) for the yield window.
func TestSlotsYieldToADownloaderWithNone(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newSlots(2, time.Second, 0)
	s.now = func() time.Time { return now }
	if s.admit("k", 2) != "" || s.admit("solo", 0) != "" {
		t.Fatal("free slots refused")
	}
	// Nobody waits: a holder served elsewhere keeps its slot.
	if r := s.admit("k", 2); r != "" {
		t.Fatalf("k refused (%s) while nobody waits", r)
	}
	s.release("k")
	s.release("k")
	// A downloader served elsewhere does not make anyone yield.
	if r := s.admit("other-k", 1); r != ReasonBusy {
		t.Fatalf("other-k: %q, want busy", r)
	}
	if r := s.admit("k", 2); r != "" {
		t.Fatalf("k refused (%s) when only a downloader served elsewhere waits", r)
	}
	s.release("k")
	// A downloader with none is turned away; k, served by two others, yields at its next request.
	if r := s.admit("starved", 0); r != ReasonBusy {
		t.Fatalf("starved: %q, want busy (slots full)", r)
	}
	if r := s.admit("solo", 0); r != "" {
		t.Fatalf("solo (served nowhere else) refused: %s", r)
	}
	s.release("solo")
	if r := s.admit("k", 2); r != ReasonYield {
		t.Fatalf("k: %q, want yield", r)
	}
	// The freed slot is kept: a downloader served elsewhere does not take it, the starved one does.
	if r := s.admit("other-k", 1); r != ReasonBusy {
		t.Fatalf("other-k took the kept slot: %q", r)
	}
	if r := s.admit("k", 2); r != ReasonBusy {
		t.Fatalf("k came back into the kept slot: %q", r)
	}
	now = now.Add(time.Second) // the starved downloader's Retry-After
	if r := s.admit("starved", 0); r != "" {
		t.Fatalf("starved refused the kept slot: %q", r)
	}
	// One yield per refusal: with nobody waiting, holders served elsewhere keep their slots.
	s.release("k") // a request k had in flight ends after its slot went: nothing breaks
	if r := s.admit("starved", 2); r != "" {
		t.Fatalf("starved, now served elsewhere too, refused its own slot: %q", r)
	}
	// The kept slot expires: past the window, a downloader served elsewhere may take a free slot.
	s2 := newSlots(1, time.Second, 0)
	s2.now = func() time.Time { return now }
	s2.admit("k", 1)
	s2.admit("starved", 0)
	if r := s2.admit("k", 1); r != ReasonYield {
		t.Fatalf("k: %q, want yield", r)
	}
	now = now.Add(yieldWindow)
	if r := s2.admit("k", 1); r != "" {
		t.Fatalf("k refused a slot free past the yield window: %q", r)
	}
}

func TestServingElsewhereHeader(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int
	}{{"", 0}, {"0", 0}, {"3", 3}, {"-1", 0}, {"x", 0}, {"1025", 0}, {"1024", 1024}} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tc.v != "" {
			r.Header.Set(peer.HeaderServing, tc.v)
		}
		if got := servingElsewhere(r); got != tc.want {
			t.Errorf("%s %q: %d, want %d", peer.HeaderServing, tc.v, got, tc.want)
		}
	}
}

// TestOverflowStopsWhenTheLinkIsFull: past the slots, one more downloader is taken per second only
// while the last one raised the served rate. Here the node's link carries 25 MiB/s whatever the cap
// (1 GiB/s): the third downloader adds nothing, so a fourth is refused; once the rate rises (the
// downloaders were slow on their side), a fourth is taken; when a downloader leaves, the rule starts
// over from the slots.
func TestOverflowStopsWhenTheLinkIsFull(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newSlots(2, time.Hour, 1<<30)
	s.now = func() time.Time { return now }
	serveFor := func(d time.Duration, rate float64) { // bytes sent at rate over d, in 50 ms steps
		for step := 50 * time.Millisecond; d > 0; d -= step {
			now = now.Add(step)
			s.sent(int(rate * step.Seconds()))
		}
	}
	const link = 25 << 20
	if !s.acquire("a") || !s.acquire("b") {
		t.Fatal("the two slots refused")
	}
	serveFor(1500*time.Millisecond, link)
	if !s.acquire("c") {
		t.Fatal("c refused while the 1 GiB/s cap is under-used")
	}
	serveFor(1500*time.Millisecond, link) // c added nothing: the link is full
	if s.acquire("d") {
		t.Fatal("d taken although c did not raise the served rate: the link is what is full")
	}
	serveFor(1500*time.Millisecond, 1.5*link)
	if !s.acquire("d") {
		t.Fatal("d refused although the rate rose by half since c was taken")
	}
	serveFor(1500*time.Millisecond, 1.5*link) // d added nothing
	if s.acquire("e") {
		t.Fatal("e taken although d did not raise the rate")
	}
	delete(s.held, "d") // a downloader leaves (its slot idle past the idle time)
	serveFor(1500*time.Millisecond, 1.5*link)
	if !s.acquire("e") {
		t.Fatal("e refused after d left: the rule should start over from the slots")
	}
}
