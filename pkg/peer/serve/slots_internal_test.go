package serve

import (
	"testing"
	"time"
)

// A downloader's parallel requests share one slot; another downloader gets one only when a slot is
// free or its holder has been idle for the idle time.
func TestSlots(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newSlots(1, 3*time.Second)
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
		t.Fatal("b took the slot while a still has a request in flight")
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
	if u := newSlots(0, 0); !u.acquire("a") || !u.acquire("b") {
		t.Error("no limit refused a downloader")
	}
}
