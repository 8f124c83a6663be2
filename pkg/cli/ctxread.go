package cli

import (
	"context"
	"io"
)

// ContextReader returns a reader whose Read returns ctx's error as soon as ctx ends, even while the
// underlying Read is blocked (stdin at a terminal, a pipe whose writer went quiet, a FIFO): a parse
// loop over it then stops within moments of SIGTERM or Ctrl-C instead of waiting for input that may
// never come. Bytes already read are never lost or handed out twice.
//
// A Read blocked in r when ctx ends is left to finish on its own goroutine, into a buffer of the
// reader's own (never the caller's), so use it where the process exits after ctx ends or r is closed.
func ContextReader(ctx context.Context, r io.Reader) io.Reader {
	return &ctxReader{ctx: ctx, r: r, res: make(chan chunk, 1)}
}

type chunk struct {
	b   []byte
	err error
}

type ctxReader struct {
	ctx     context.Context
	r       io.Reader
	res     chan chunk
	pending bool   // a read is in flight on the background goroutine
	scratch []byte // what that read fills; reused once buf is drained
	buf     []byte // read but not yet handed out
	err     error  // the underlying reader's terminal error, after buf
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	if c.err != nil {
		return 0, c.err
	}
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	if !c.pending {
		if c.scratch == nil {
			c.scratch = make([]byte, 64<<10)
		}
		c.pending = true
		go func(b []byte) {
			n, err := c.r.Read(b)
			c.res <- chunk{b[:n], err}
		}(c.scratch)
	}
	select {
	case ch := <-c.res:
		c.pending = false
		n := copy(p, ch.b)
		c.buf = ch.b[n:]
		c.err = ch.err
		if n == 0 && c.err != nil {
			return 0, c.err
		}
		return n, nil
	case <-c.ctx.Done():
		return 0, c.ctx.Err()
	}
}
