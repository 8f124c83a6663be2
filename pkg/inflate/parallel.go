package inflate

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
)

// DefaultHold is how many chunks a consumer of DecodeIndexed may keep unreleased at once.
const DefaultHold = 8

// DecodeIndexed inflates src (the whole compressed stream, idx.CompressedSize bytes) on several cores:
// the spans between idx's points decode at once, and emit gets their chunks in stream order. Memory
// is the pool's: a span that runs ahead of the one being emitted waits for buffers. A point that
// does not match the stream fails with ErrIndex; a point whose window is wrong yields wrong bytes,
// which only a check of the output (the diff ID) can catch, so callers always check it and fall back
// to Decode. Members wholly inside one span have their CRC-32 and size checked; the others are
// covered by the caller's digest.
func DecodeIndexed(ctx context.Context, src io.ReaderAt, idx *Index, emit func(*Chunk) error, o Options) (Result, error) {
	segs := len(idx.Points) + 1
	var maxGap int64
	prev := int64(0)
	for _, p := range idx.Points {
		maxGap = max(maxGap, p.Out-prev)
		prev = p.Out
	}
	maxGap = max(maxGap, idx.Size-prev)
	chunkSize := DefaultChunkSize
	if o.Pool != nil {
		chunkSize = o.Pool.ChunkSize()
	}
	segChunks := int(maxGap/int64(chunkSize)) + 2
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = max(1, min(workers, segs))
	pool := o.Pool
	if pool == nil {
		pool = NewPool(workers*(segChunks+2)+DefaultHold+2, chunkSize)
	}
	// Spans waiting to be emitted must not take the buffers the one being emitted needs: each of the
	// at most `workers` unemitted spans holds its queued chunks plus two in hand (flush takes the
	// next buffer before it hands the current one on).
	workers = max(1, min(workers, (pool.Cap()-DefaultHold-2)/(segChunks+2)))

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	outs := make([]chan *Chunk, segs)
	errs := make([]error, segs)
	for i := range outs {
		outs[i] = make(chan *Chunk, segChunks)
	}
	next := make(chan int)
	// At most `workers` spans are started and not yet emitted, so each worker runs at most one span
	// ahead of the emitter, and the pool covers them all: a worker that ran further ahead could take
	// the buffers the span being emitted needs.
	inflight := make(chan struct{}, workers)
	// held[k] says span k took an inflight token, so the emitter gives one back: spans the feeder
	// closes after a cancel never took one. Each is written before outs[k] closes and read after.
	held := make([]bool, segs)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := range next {
				errs[k] = decodeSpan(ctx, src, idx, k, pool, outs[k], o.MaxOutput)
				close(outs[k])
				if errs[k] != nil {
					cancel(errs[k])
				}
			}
		})
	}
	go func() {
		defer close(next)
		for k := range segs {
			select {
			case inflight <- struct{}{}:
				held[k] = true
			case <-ctx.Done():
				for ; k < segs; k++ {
					close(outs[k])
				}
				return
			}
			select {
			case next <- k:
			case <-ctx.Done():
				for ; k < segs; k++ {
					close(outs[k])
				}
				return
			}
		}
	}()
	res := Result{In: idx.CompressedSize}
	var err error
	for k := range segs {
		for c := range outs[k] {
			if err == nil {
				res.Out += int64(len(c.Data))
				if err = emit(c); err != nil {
					cancel(err)
				}
				continue
			}
			c.Release()
		}
		if held[k] {
			<-inflight
		}
		if err == nil && errs[k] != nil {
			err = errs[k]
		}
		if err == nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
	}
	wg.Wait()
	if err == nil && res.Out != idx.Size {
		err = fmt.Errorf("%w: inflated %d bytes, index says %d", ErrIndex, res.Out, idx.Size)
	}
	return res, err
}

// decodeSpan decodes span k: from the stream's start or point k-1, to point k or the stream's end.
func decodeSpan(ctx context.Context, src io.ReaderAt, idx *Index, k int, pool *Pool, out chan<- *Chunk, limit int64) error {
	start := Point{}
	if k > 0 {
		start = idx.Points[k-1]
	}
	off := start.In / 8
	end := idx.CompressedSize
	if k < len(idx.Points) {
		end = min(end, idx.Points[k].In/8+1)
	}
	emit := func(c *Chunk) error {
		select {
		case out <- c:
			return nil
		case <-ctx.Done():
			c.Release()
			return context.Cause(ctx)
		}
	}
	d, err := newDecoder(ctx, io.NewSectionReader(src, off, idx.CompressedSize-off), end-off, off, pool, emit, limit)
	if err != nil {
		return err
	}
	defer d.release()
	r := run{d: d, ctx: ctx, header: k == 0, stopOut: -1}
	if k < len(idx.Points) {
		r.stopOut, r.stopIn = idx.Points[k].Out, idx.Points[k].In
	}
	if k > 0 {
		w := copy(d.out, start.Window)
		d.op, d.from, d.crcFrom, d.lo, d.outBase = w, w, w, 0, start.Out
		if skip := uint(start.In % 8); skip > 0 {
			if _, err := d.getBits(skip); err != nil {
				return err
			}
		}
	}
	if err := r.members(); err != nil {
		return fmt.Errorf("span %d (output %d): %w", k, start.Out, err)
	}
	return d.finish()
}
