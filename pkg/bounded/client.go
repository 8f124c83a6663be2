package bounded

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Doer is what Client wraps and is: *http.Client, and the S3 SDK's HTTPClient.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Client is a Doer whose requests stall out, whose error bodies are cut and whose bodies respect
// the context's WithBodyLimit. Its zero fields take the defaults; Stall <= 0 turns the stall check
// off (bodies are still bounded).
type Client struct {
	Inner Doer
	// Stall is how long a request may wait on the network (for its headers, then inside body
	// reads; time the caller spends between reads does not count) while receiving fewer than
	// MinBytes, before it fails with a StallError.
	Stall time.Duration
	// MinBytes is the progress that restarts the Stall count. Default DefaultMinBytes.
	MinBytes int64
	// ErrorBody is how many bytes of a body with status >= 300 are passed on; the rest is never
	// read (the connection is closed). Default DefaultErrorBody.
	ErrorBody int64
}

var _ Doer = (*Client)(nil)

// StallError is a request that made too little progress. It does not wrap context.Canceled: the
// request stalled, the caller did not give up, so a retry is in order.
type StallError struct {
	Waited time.Duration
	Got    int64
	Min    int64
}

func (e *StallError) Error() string {
	return fmt.Sprintf("stalled: %d bytes in %s of waiting, under the %d bytes a request must make per stall timeout (the server sends too slowly or not at all)",
		e.Got, e.Waited.Round(time.Millisecond), e.Min)
}

// Do implements Doer.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	min := c.MinBytes
	if min <= 0 {
		min = DefaultMinBytes
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	w := &watch{stall: c.Stall, min: min, cancel: cancel}
	w.enter()
	resp, err := c.Inner.Do(req.WithContext(ctx))
	if serr := w.leave(0); err != nil || serr != nil {
		if resp != nil {
			resp.Body.Close()
		}
		cancel(nil)
		if se := w.fired(); se != nil {
			return nil, se
		}
		if err == nil {
			err = serr
		}
		return nil, err
	}
	limit, limited := int64(-1), false
	if resp.StatusCode >= 300 {
		limit = c.ErrorBody
		if limit <= 0 {
			limit = DefaultErrorBody
		}
	} else if n, ok := bodyLimit(req.Context()); ok {
		limit, limited = n, true
	}
	resp.Body = &body{r: resp.Body, w: w, cancel: cancel, left: limit, limit: limit, fail: limited}
	return resp, nil
}

// watch counts a request's time waiting on the network and the bytes it got meanwhile.
type watch struct {
	stall  time.Duration
	min    int64
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	timer  *time.Timer
	since  time.Time
	waited time.Duration
	got    int64
	err    *StallError // set once it fired
}

// enter starts a wait: the timer fires when the stall budget left runs out during it.
func (w *watch) enter() {
	if w.stall <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.since = time.Now()
	left := w.stall - w.waited
	if w.timer == nil {
		w.timer = time.AfterFunc(left, w.fire)
	} else {
		w.timer.Reset(left)
	}
}

// leave ends a wait that brought n bytes and returns the StallError if the budget ran out.
func (w *watch) leave(n int) *StallError {
	if w.stall <= 0 {
		return nil
	}
	w.mu.Lock()
	w.timer.Stop()
	w.waited += time.Since(w.since)
	w.got += int64(n)
	if w.got >= w.min {
		w.waited, w.got = 0, 0
	}
	over := w.waited >= w.stall && w.err == nil
	w.mu.Unlock()
	if over {
		w.fire()
	}
	return w.fired()
}

func (w *watch) fire() {
	w.mu.Lock()
	if w.err == nil {
		w.waited += time.Since(w.since)
		w.err = &StallError{Waited: w.waited, Got: w.got, Min: w.min}
	}
	err := w.err
	w.mu.Unlock()
	w.cancel(err)
}

func (w *watch) fired() *StallError {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *watch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}

// body is a response body under a watch and a length limit (left < 0: none).
type body struct {
	r      io.ReadCloser
	w      *watch
	cancel context.CancelCauseFunc
	left   int64
	limit  int64
	fail   bool // past the limit: ErrTooLong (a caller's limit), else EOF (an error body cut)
}

func (b *body) Read(p []byte) (int, error) {
	if b.left == 0 {
		if !b.fail {
			return 0, io.EOF
		}
		// One byte more tells a body that ends at the limit from one that goes on.
		var one [1]byte
		if n, _ := b.read(one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("%w: the body goes on past %d bytes", ErrTooLong, b.limit)
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	return n, err
}

func (b *body) read(p []byte) (int, error) {
	b.w.enter()
	n, err := b.r.Read(p)
	if se := b.w.leave(n); se != nil {
		return n, se
	}
	return n, err
}

func (b *body) Close() error {
	b.w.stop()
	err := b.r.Close()
	b.cancel(nil)
	return err
}
