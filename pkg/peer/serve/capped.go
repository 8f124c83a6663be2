package serve

import (
	"context"
	"io"
	"net/http"
	"time"
)

// capped is the ResponseWriter every body goes through: bytes wait for the shared upload cap, in
// pieces no larger than its burst, and are counted. It hands a file's pieces to the connection
// itself (ReadFrom), so the kernel sends them from the page cache (sendfile) instead of copying them
// through this process: serving peers then costs a node's CPUs, which its pods need, one copy per byte less.
type capped struct {
	http.ResponseWriter
	h   *Handler
	ctx context.Context
	rc  *http.ResponseController
	// sent is how many body bytes went out.
	sent int64
	// again: the body is a weight file's copy that is not its first from here (spread.take); its
	// pieces take only the cap that first copies leave, for up to againWait in all.
	again bool
	// waited is how long its pieces waited for the cap first copies leave, at most againWait.
	waited time.Duration
}

// againWait is Handler.againWait: the pieces of a copy that is not its file's first wait this long
// in all at most for the cap the first copies leave, then their turn like any other. Far under a
// downloader's stall timeout (peers.stallTimeout, 10 s by default), so no downloader gives a peer up
// over it.
const againWait = 2 * time.Second

// pace waits until n bytes may be sent under the cap, then gives the piece WriteStall to reach the
// client (the connection's write deadline; past it the write fails and the response ends).
func (c *capped) pace(n int) error {
	if c.h.limiter != nil && !(c.again && c.leftover(n)) {
		if err := c.h.limiter.WaitN(c.ctx, n); err != nil {
			return err
		}
	}
	if err := c.ctx.Err(); err != nil {
		return err
	}
	_ = c.rc.SetWriteDeadline(time.Now().Add(c.h.opts.WriteStall)) // unsupported: no deadline, as before
	return nil
}

// leftover takes n bytes of the cap that no first copy waits for (first copies first, spread.go):
// a first copy's pieces wait their turn (WaitN), which reserves the cap ahead of time, so while one
// is sent at the cap there is none left, and this piece waits; while the first copies' downloaders
// cannot take the cap (their own links are full), the cap they leave fills up and goes to this one.
// It reports false when the response's againWait is spent: this piece and the rest wait their turn.
func (c *capped) leftover(n int) bool {
	poll := min(max(time.Duration(float64(n)/float64(c.h.limiter.Limit())*float64(time.Second))/2, time.Millisecond), 20*time.Millisecond)
	start := time.Now()
	defer func() { c.waited += time.Since(start) }()
	until := start.Add(c.h.againWait - c.waited)
	for time.Now().Before(until) {
		if c.h.limiter.AllowN(time.Now(), n) {
			return true
		}
		select {
		case <-c.ctx.Done():
			return true // the caller reports the context's error
		case <-time.After(poll):
		}
	}
	c.again = false // its wait is spent: the rest of the response waits its turn
	return false
}

// count records n bytes sent.
func (c *capped) count(n int) {
	c.sent += int64(n)
	if c.h.opts.Metrics != nil {
		c.h.opts.Metrics.ServedBytes.Add(float64(n))
	}
	c.h.slots.sent(n)
}

func (c *capped) Write(p []byte) (int, error) {
	var done int
	for len(p) > 0 {
		n := min(len(p), c.h.piece)
		if err := c.pace(n); err != nil {
			return done, err
		}
		m, err := c.ResponseWriter.Write(p[:n])
		done += m
		c.count(m)
		if err != nil {
			return done, err
		}
		p = p[n:]
	}
	return done, nil
}

// writerOnly hides capped's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

// ReadFrom implements io.ReaderFrom for http.ServeContent, which copies a range of the file as an
// *io.LimitedReader over the *os.File: each piece goes to the connection's own ReadFrom as a
// LimitedReader over the file itself, which net/http and the kernel send with sendfile. Anything
// else is copied through Write.
func (c *capped) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := c.ResponseWriter.(io.ReaderFrom)
	lr, limited := src.(*io.LimitedReader)
	if !ok || !limited {
		return io.Copy(writerOnly{c}, src)
	}
	var done int64
	for lr.N > 0 {
		n := min(lr.N, int64(c.h.piece))
		if err := c.pace(int(n)); err != nil {
			return done, err
		}
		m, err := rf.ReadFrom(&io.LimitedReader{R: lr.R, N: n})
		lr.N -= m
		done += m
		c.count(int(m))
		if err != nil || m < n { // an error, or the file ended early
			return done, err
		}
	}
	return done, nil
}
