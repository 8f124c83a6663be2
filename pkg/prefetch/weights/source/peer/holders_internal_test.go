package peer

import (
	"testing"
	"time"
)

// TestHoldersCountsPeersThatCanSendNow: the picker's holder count leaves out a peer resting after a
// busy answer and one already sending askableInflight chunks of this fetch, so a wave starts the files
// a peer with spare capacity holds; the seed's own "does anyone hold it" check still counts them all.
func TestHoldersCountsPeersThatCanSendNow(t *testing.T) {
	s := New(Options{})
	warm := &member{host: "127.0.0.2:1"}                                       // holds every file
	partial := &member{host: "127.0.0.3:1", files: map[string]bool{"a": true}} // verified a only
	s.peers = []*member{warm, partial}
	if got := s.Holders("a", 0, 10); got != 2 {
		t.Fatalf("holders of a with both idle: %d, want 2", got)
	}
	if got := s.Holders("b", 0, 10); got != 1 {
		t.Fatalf("holders of b: %d, want the warm peer", got)
	}
	warm.inflight.Store(askableInflight)
	if got := s.Holders("b", 0, 10); got != 0 {
		t.Errorf("holders of b with its one holder sending %d chunks: %d, want 0", askableInflight, got)
	}
	if got := s.holders("b", 0, 10, false); got != 1 {
		t.Errorf("every holder of b: %d, want 1 (a peer at its share still holds the file)", got)
	}
	warm.inflight.Store(0)
	partial.busyUntil.Store(time.Now().Add(time.Minute).UnixNano())
	if got := s.Holders("a", 0, 10); got != 1 {
		t.Errorf("holders of a with one peer resting after a busy answer: %d, want 1", got)
	}
	partial.busyUntil.Store(time.Now().Add(-time.Second).UnixNano())
	if got := s.Holders("a", 0, 10); got != 2 {
		t.Errorf("holders of a once the rest is over: %d, want 2", got)
	}
	partial.dead.Store(true)
	if got := s.holders("a", 0, 10, false); got != 1 {
		t.Errorf("holders of a with the partial peer dropped: %d, want 1", got)
	}
}

// TestPickAsksTheHolderWithFewerFiles: of two holders equally busy with this fetch, the one that
// holds fewer files is asked; the node holding everything keeps its upload for what only it holds.
func TestPickAsksTheHolderWithFewerFiles(t *testing.T) {
	s := New(Options{})
	warm := &member{host: "127.0.0.2:1"}
	ahead := &member{host: "127.0.0.3:1", files: map[string]bool{"a": true, "b": true, "c": true}}
	behind := &member{host: "127.0.0.4:1", files: map[string]bool{"a": true}}
	s.peers = []*member{warm, ahead, behind}
	for range 3 { // whatever the turn
		m := s.pick("a", 0, 10)
		if m != behind {
			t.Fatalf("picked %s for a; want %s, the holder with the fewest files", m.host, behind.host)
		}
		m.inflight.Add(-1)
	}
	behind.inflight.Store(1)
	if m := s.pick("a", 0, 10); m != ahead {
		t.Errorf("with the fewest-files holder sending a chunk: picked %s, want %s", m.host, ahead.host)
	}
	ahead.inflight.Store(0)
	if m := s.pick("c", 0, 10); m != ahead {
		t.Errorf("c: picked %s, want %s (the warm peer holds more)", m.host, ahead.host)
	}
}
