package weights

import (
	"context"
	"testing"
)

// TestBufPoolDropsBuffersWhenIdle: when the last fetch leaves, the pool gives its idle buffers back to
// the heap (a warm node at rest holds none); a buffer still out then is counted until it returns, so
// the bound holds across rounds.
func TestBufPoolDropsBuffersWhenIdle(t *testing.T) {
	ctx := context.Background()
	p := newBufPool(4096, 3)
	p.enter()
	p.enter()
	a, _ := p.get(ctx)
	b, _ := p.get(ctx)
	p.put(a)
	p.leave()
	if p.made != 2 || len(p.ch) != 1 {
		t.Fatalf("with a fetch still running: made %d, idle %d; want 2 and 1 (nothing dropped)", p.made, len(p.ch))
	}
	p.leave()
	if p.made != 1 || len(p.ch) != 0 {
		t.Fatalf("after the last fetch left: made %d, idle %d; want 1 (the buffer still out) and 0", p.made, len(p.ch))
	}
	p.put(b)
	p.enter()
	for range 3 {
		if _, err := p.get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if p.made != 3 {
		t.Fatalf("made %d buffers in the next round, want the bound 3", p.made)
	}
}
