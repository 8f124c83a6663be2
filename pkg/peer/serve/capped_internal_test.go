package serve

import (
	"context"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// A copy that is not its file's first takes the cap only when no first copy has reserved it: at
// once from a full bucket, not within againWait while a first copy's piece waits ahead of it (and
// then, its wait spent, its pieces wait their turn), and it ends at once when its request does.
func TestLeftoverWaitsForFirstCopies(t *testing.T) {
	const piece = 32 << 10
	h := &Handler{limiter: rate.NewLimiter(64<<10, piece), piece: piece, againWait: 100 * time.Millisecond}
	c := &capped{h: h, ctx: context.Background(), again: true}
	start := time.Now()
	if !c.leftover(piece) {
		t.Fatal("a full bucket: the piece waited")
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("a full bucket: the piece took %v", d)
	}
	h.limiter.ReserveN(time.Now(), piece) // a first copy's next piece, half a second ahead
	start = time.Now()
	if c.leftover(piece) {
		t.Error("the cap is reserved by a first copy: the piece took it anyway")
	}
	if d := time.Since(start); d < h.againWait {
		t.Errorf("gave up after %v, want againWait (%v)", d, h.againWait)
	}
	if c.again {
		t.Error("againWait spent: the response's next pieces still wait for the cap first copies leave")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.ctx = ctx
	if err := c.pace(piece); err == nil {
		t.Error("pace for a request that ended: no error")
	}
}
