package peer

import (
	"sync"
	"testing"

	"warmd.io/warmd/pkg/peer"
)

// TestACorruptPeerIsCreditedNothing: bytes a peer sends are credited as they land; once it proves
// corrupt, what it was credited is taken back once, and bytes of its ranges still in flight are not
// credited (the read stops). Before, a range in flight at the drop still added its bytes afterwards.
func TestACorruptPeerIsCreditedNothing(t *testing.T) {
	s := New(Options{})
	m := &member{host: "127.0.0.2:1"}
	if !s.creditBytes(m, 1000) {
		t.Fatal("a healthy peer's bytes were refused")
	}
	// Ranges in flight at the drop, racing it.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if !s.creditBytes(m, 7) {
					return
				}
			}
		}()
	}
	s.drop(m, peer.DropCorrupt, "bytes differ")
	wg.Wait()
	s.drop(m, peer.DropCorrupt, "again") // counted once
	if s.creditBytes(m, 5) {
		t.Error("a corrupt peer's bytes were credited after its drop")
	}
	if got := s.peerBytes.Load(); got != 0 {
		t.Errorf("peerBytes %d after the only peer proved corrupt, want 0", got)
	}
	if len(s.dropped) != 1 {
		t.Errorf("dropped %v, want the peer once", s.dropped)
	}
}
