package containerd

import (
	"io"
	"sync"

	"warmd.io/warmd/pkg/inflate"
)

// chunkPipe hands decoded chunks from the decoder's goroutine to a reader without copying them and
// without making the decoder wait for each chunk to be read whole (io.Pipe's writer does); it holds
// at most its capacity, so memory stays the decoder's pool.
type chunkPipe struct {
	ch   chan *inflate.Chunk
	done chan struct{}
	once sync.Once
	err  error
	cur  *inflate.Chunk
	off  int
}

func newChunkPipe(capacity int) *chunkPipe {
	return &chunkPipe{ch: make(chan *inflate.Chunk, capacity), done: make(chan struct{})}
}

// send queues a chunk; it fails once the reader has gone away.
func (p *chunkPipe) send(c *inflate.Chunk) error {
	select {
	case p.ch <- c:
		return nil
	case <-p.done:
		c.Release()
		return io.ErrClosedPipe
	}
}

// close ends the stream; the reader sees err (io.EOF when nil) after the queued chunks.
func (p *chunkPipe) close(err error) {
	if err == nil {
		err = io.EOF
	}
	p.err = err
	close(p.ch)
}

func (p *chunkPipe) Read(b []byte) (int, error) {
	for p.cur == nil || p.off == len(p.cur.Data) {
		if p.cur != nil {
			p.cur.Release()
			p.cur = nil
		}
		c, ok := <-p.ch
		if !ok {
			return 0, p.err
		}
		p.cur, p.off = c, 0
	}
	n := copy(b, p.cur.Data[p.off:])
	p.off += n
	return n, nil
}

// drain, called by the reader when it stops, releases what is queued and unblocks the sender.
func (p *chunkPipe) drain() {
	p.once.Do(func() { close(p.done) })
	if p.cur != nil {
		p.cur.Release()
		p.cur = nil
	}
	for c := range p.ch {
		c.Release()
	}
}
