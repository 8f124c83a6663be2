package inflate

import (
	"context"
	"hash/crc32"
	"sync"
)

// DefaultChunkSize is the output a Chunk carries at most (plus its 32 KiB of history in front).
const DefaultChunkSize = 1 << 20

// DefaultPoolChunks is the size of the pool a serial Decode makes when given none.
const DefaultPoolChunks = 8

// Pool is a bounded set of chunk buffers. A decoder that has used them all waits for its consumer to
// release one, so memory is bounded by the pool, never by how far the consumer lags. Buffers are made
// when first needed, so a small layer costs the one or two it fills, not the pool's whole bound.
type Pool struct {
	free  chan []byte
	size  int
	mu    sync.Mutex
	made  int
	limit int
}

// NewPool makes a pool of up to n buffers that each carry up to size bytes of output.
func NewPool(n, size int) *Pool {
	return &Pool{free: make(chan []byte, n), size: size, limit: n}
}

// Cap is how many buffers the pool holds at most.
func (p *Pool) Cap() int { return p.limit }

// ChunkSize is the output one buffer carries at most.
func (p *Pool) ChunkSize() int { return p.size }

// get takes a free buffer, makes one while under the bound, or waits for one or for ctx to end.
func (p *Pool) get(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.free:
		return b, nil
	default:
	}
	p.mu.Lock()
	if p.made < p.limit {
		p.made++
		p.mu.Unlock()
		return make([]byte, histSize+p.size+outSlack), nil
	}
	p.mu.Unlock()
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
