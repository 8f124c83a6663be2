package weights

import (
	"context"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/time/rate"

	"warmd.io/warmd/pkg/objstore"
)

// bufPool is the bounded pool of copy buffers every download worker shares. Bodies stream through
// one buffer per worker into WriteAt, so memory is workers × buffer size whatever the object or
// chunk sizes: 16 workers × 1 MiB = 16 MiB, far under the 256 MiB process target. Buffers are
// aligned to dioAlign so full ones can be written with O_DIRECT.
// Buffers are made when first needed and given back to the Go heap when the last fetch using the
// pool ends (enter/leave), so a warm node at rest holds none of them.
type bufPool struct {
	size  int
	ch    chan []byte
	mu    sync.Mutex
	made  int
	limit int
	users int
}

// enter marks a fetch that may take buffers; leave ends it, and the last one out drops every idle buffer.
func (p *bufPool) enter() {
	p.mu.Lock()
	p.users++
	p.mu.Unlock()
}

func (p *bufPool) leave() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.users--; p.users > 0 {
		return
	}
	for {
		select {
		case <-p.ch: // a buffer still out is put back later and stays counted in made
			p.made--
		default:
			return
		}
	}
}

func newBufPool(size, count int) *bufPool {
	return &bufPool{size: size, limit: count, ch: make(chan []byte, count)}
}

func (p *bufPool) get(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.ch:
		return b, nil
	default:
	}
	p.mu.Lock()
	if p.made < p.limit {
		p.made++
		p.mu.Unlock()
		return alignedBuf(p.size), nil
	}
	p.mu.Unlock()
	select {
	case b := <-p.ch:
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *bufPool) put(b []byte) { p.ch <- b }

// bandwidth caps download bytes per second across every worker (nil: no cap). It also counts what
// it admitted and the delay it imposed, so tests check the cap by its accounting, not by wall time.
type bandwidth struct {
	lim      *rate.Limiter
	admitted atomic.Int64
	delayed  atomic.Int64 // nanoseconds of reservations' delay
}

func newBandwidth(bytesPerSec int64, burst int) *bandwidth {
	if bytesPerSec <= 0 {
		return nil
	}
	return &bandwidth{lim: rate.NewLimiter(rate.Limit(bytesPerSec), burst)}
}

func (b *bandwidth) wait(ctx context.Context, n int) error {
	if b == nil {
		return nil
	}
	for n > 0 {
		step := min(n, b.lim.Burst())
		r := b.lim.ReserveN(time.Now(), step)
		if !r.OK() {
			return fmt.Errorf("bandwidth limiter refused %d bytes", step)
		}
		d := r.Delay()
		b.delayed.Add(int64(d))
		b.admitted.Add(int64(step))
		if d > 0 {
			if err := sleepCtx(ctx, d); err != nil {
				r.Cancel()
				return err
			}
		}
		n -= step
	}
	return nil
}

// dioAlign is the alignment O_DIRECT needs of offsets, lengths and buffers (the logical block
// size of every disk we meet is 512 or 4096).
const dioAlign = 4096

// bufferedPiece bounds one buffered write (see Options.BufferSize).
const bufferedPiece = 128 << 10

func alignedBuf(size int) []byte {
	b := make([]byte, size+dioAlign)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (dioAlign - 1))
	if off != 0 {
		off = dioAlign - off
	}
	return b[off : off+size : off+size]
}

// chunkWriter receives one chunk's bytes in order and writes them at their offset in the staged file.
// It implements io.ReaderFrom so the body is read straight into a pooled buffer. Aligned writes go
// to the O_DIRECT descriptor when the file has one, the rest (a file's tail, after a short read)
// through the page cache.
type chunkWriter struct {
	ctx     context.Context
	f       *os.File
	direct  *os.File
	off     int64
	pool    *bufPool
	bw      *bandwidth
	written int64
	onBytes func(int64)
	// crc, when set, hashes the chunk's bytes in order as they are written (see fetch.streamAlg).
	crc hash.Hash
	// want is the chunk's length (0: unknown), which sizes the buffer of a small one.
	want int64
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	if err := w.bw.wait(w.ctx, len(p)); err != nil {
		return 0, objstore.WriterError(err)
	}
	off := w.off + w.written
	var n int
	var err error
	if w.direct != nil && len(p) > 0 && off%dioAlign == 0 && len(p)%dioAlign == 0 && uintptr(unsafe.Pointer(&p[0]))%dioAlign == 0 {
		n, err = w.direct.WriteAt(p, off)
	} else {
		for n < len(p) && err == nil {
			var m int
			m, err = w.f.WriteAt(p[n:min(len(p), n+bufferedPiece)], off+int64(n))
			n += m
		}
	}
	if w.crc != nil {
		w.crc.Write(p[:n])
	}
	w.written += int64(n)
	w.onBytes(int64(n))
	if err != nil {
		return n, objstore.WriterError(err)
	}
	return n, nil
}

func (w *chunkWriter) ReadFrom(r io.Reader) (int64, error) {
	var buf []byte
	if w.want > 0 && w.want < int64(w.pool.size) {
		// A piece smaller than a pooled buffer (a config, a tokenizer, a small file's one chunk)
		// gets a buffer its size: the worker's share of the pool's bound, not a whole MiB.
		buf = alignedBuf(int((w.want + dioAlign - 1) / dioAlign * dioAlign))
	} else {
		var err error
		if buf, err = w.pool.get(w.ctx); err != nil {
			return 0, objstore.WriterError(err)
		}
		defer w.pool.put(buf)
	}
	var total int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		switch {
		case rerr == io.EOF || rerr == io.ErrUnexpectedEOF:
			// End of this body; the source compares the total with the range it asked for.
			return total, nil
		case rerr != nil:
			return total, rerr
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
