package containerd

import (
	"io"
	"sync"
)

// asyncWriter decouples a producer from a slow consumer: content writes to the daemon are gRPC
// round trips, and done inline they would stall warmd's gunzip on every message. Writes are
// gathered into blocks of blockSize and handed to one goroutine, at most depth blocks ahead.
type asyncWriter struct {
	w     io.Writer
	cur   []byte
	q     chan []byte
	free  chan []byte
	wg    sync.WaitGroup
	mu    sync.Mutex
	err   error
	block int
}

func newAsyncWriter(w io.Writer, blockSize, depth int) *asyncWriter {
	a := &asyncWriter{w: w, q: make(chan []byte, depth), free: make(chan []byte, depth+2), block: blockSize}
	a.wg.Go(func() {
		for b := range a.q {
			if a.failed() == nil {
				if _, err := a.w.Write(b); err != nil {
					a.mu.Lock()
					a.err = err
					a.mu.Unlock()
				}
			}
			select {
			case a.free <- b[:0]:
			default:
			}
		}
	})
	return a
}

func (a *asyncWriter) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Write buffers p; it returns the consumer's first error, if any.
func (a *asyncWriter) Write(p []byte) (int, error) {
	if err := a.failed(); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		if a.cur == nil {
			select {
			case a.cur = <-a.free:
			default:
				a.cur = make([]byte, 0, a.block)
			}
		}
		k := min(a.block-len(a.cur), len(p))
		a.cur = append(a.cur, p[:k]...)
		p = p[k:]
		if len(a.cur) == a.block {
			a.q <- a.cur
			a.cur = nil
		}
	}
	return n, nil
}

// Close hands over what is buffered, waits for every write and returns the first error. The
// asyncWriter is unusable afterwards.
func (a *asyncWriter) Close() error {
	if len(a.cur) > 0 {
		a.q <- a.cur
		a.cur = nil
	}
	close(a.q)
	a.wg.Wait()
	return a.failed()
}
