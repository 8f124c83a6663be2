package inflate

import (
	"context"
	"hash/crc32"
)

// DefaultChunkSize is the output a Chunk carries at most (plus its 32 KiB of history in front).
const DefaultChunkSize = 1 << 20

// DefaultPoolChunks is the size of the pool a serial Decode makes when given none.
const DefaultPoolChunks = 8

// Pool is a fixed set of chunk buffers. A decoder that has used them all waits for its consumer to
// release one, so memory is bounded by the pool, never by how far the consumer lags.
type Pool struct {
	free chan []byte
	size int
}

// NewPool makes n buffers that each carry up to size bytes of output.
func NewPool(n, size int) *Pool {
	p := &Pool{free: make(chan []byte, n), size: size}
	for range n {
		p.free <- make([]byte, histSize+size+outSlack)
	}
	return p
}

// Cap is how many buffers the pool holds.
func (p *Pool) Cap() int { return cap(p.free) }

// ChunkSize is the output one buffer carries at most.
func (p *Pool) ChunkSize() int { return p.size }

// get waits for a free buffer, or for ctx to end.
func (p *Pool) get(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.free:
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *Pool) put(b []byte) { p.free <- b }

// Chunk is a piece of output in order. Data is valid until Release, which the consumer must call
// exactly once.
type Chunk struct {
	Data []byte
	buf  []byte
	pool *Pool
}

// Release gives the chunk's buffer back to its pool.
func (c *Chunk) Release() {
	if c.buf != nil {
		c.pool.put(c.buf)
		c.buf, c.Data = nil, nil
	}
}

func crc32Update(c uint32, p []byte) uint32 { return crc32.Update(c, crc32.IEEETable, p) }
