package inflate

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
)

// Options tune a decode.
type Options struct {
	// Span asks a serial decode to record a checkpoint about every Span bytes of output, for later
	// parallel decodes; 0 records none. A checkpoint costs 32 KiB, so a 4 GiB layer at the default
	// span (DefaultSpan) keeps an index of about 8 MiB before compression.
	Span int64
	// MaxOutput fails the decode with ErrTooLarge once the output passes it; 0 means no limit.
	MaxOutput int64
	// Pool supplies the output chunks (a default pool of DefaultPoolChunks when nil).
	Pool *Pool
	// Workers bounds the goroutines of an indexed decode; 0 means GOMAXPROCS.
	Workers int
	// InputSize is the compressed stream's size when the caller knows it (a layer's descriptor
	// does), 0 otherwise: a serial decode of a small stream then reads through a buffer its size
	// and, without a Pool, emits smaller chunks, rather than taking MiB buffers. A wrong size costs
	// only speed.
	InputSize int64
}

// DefaultSpan is the output distance between checkpoints: small enough that a layer of a few GiB
// splits into hundreds of segments for every core of a big node, large enough that the index stays
// a fraction of a percent of the layer.
const DefaultSpan = 16 << 20

// Result is what a decode saw.
type Result struct {
	// In and Out are the compressed bytes read and the bytes inflated.
	In, Out int64
	// Members is the number of gzip members (images built by parallel compressors have many).
	Members int
	// Index holds the checkpoints a serial decode recorded (nil when Options.Span is 0).
	Index *Index
}

// chunkSizeFor is the output chunk size of a serial decode's own pool: DefaultChunkSize, or for a
// small stream of known size that size (at least 64 KiB), so a small layer's output does not take
// MiB buffers; one that inflates more just fills more chunks, each handed on as it fills.
func chunkSizeFor(inputSize int64) int {
	if inputSize <= 0 {
		return DefaultChunkSize
	}
	return int(min(DefaultChunkSize, max(64<<10, inputSize)))
}

// Decode inflates the gzip stream src, every member in order, handing each chunk of output to emit
// (which must Release it). A serial decode checks each member's CRC-32 and size and, with
// Options.Span, records the checkpoint index that DecodeIndexed uses.
func Decode(ctx context.Context, src io.Reader, emit func(*Chunk) error, o Options) (Result, error) {
	pool := o.Pool
	if pool == nil {
		pool = NewPool(DefaultPoolChunks, chunkSizeFor(o.InputSize))
	}
	d, err := newDecoder(ctx, src, o.InputSize, 0, pool, emit, o.MaxOutput)
	if err != nil {
		return Result{}, err
	}
	defer d.release()
	var idx *Index
	if o.Span > 0 {
		idx = &Index{Span: o.Span}
	}
	r := run{d: d, ctx: ctx, span: o.Span, idx: idx, header: true, stopOut: -1}
	if err := r.members(); err != nil {
		return Result{In: d.pos() / 8, Out: d.total()}, err
	}
	res := Result{In: d.pos() / 8, Out: d.total(), Members: r.members_, Index: idx}
	if err := d.finish(); err != nil {
		return res, err
	}
	if idx != nil {
		idx.CompressedSize, idx.Size = res.In, res.Out
	}
	return res, nil
}

// run drives a decoder over gzip members: from the stream's start (header) or from a checkpoint in
// the middle of a member, until the input ends or, for a segment, until stopOut bytes are out.
type run struct {
	d      *decoder
	ctx    context.Context
	span   int64
	idx    *Index
	last   int64 // output offset of the last checkpoint
	header bool  // start by reading a gzip header
	// stopOut ends a segment at the block boundary where the output reaches it, which must be at the
	// bit offset stopIn; -1 runs to the end of the stream.
	stopOut  int64
	stopIn   int64
	members_ int
}

func (r *run) members() error {
	d := r.d
	for first := true; ; first = false {
		if r.header || !first {
			if !first {
				d.align()
				if end, err := d.atEOF(); err != nil || end {
					return err
				}
			}
			if err := d.header(); err != nil {
				return err
			}
			d.crcOn, d.crc, d.crcFrom, d.lo, d.memberStart = true, 0, d.op, d.op, d.total()
			r.members_++
		}
		done, err := r.blocks()
		if err != nil || done {
			return err
		}
		if err := d.trailer(); err != nil {
			return err
		}
	}
}

// blocks decodes the blocks of one member; done is true when a segment reached its end.
func (r *run) blocks() (done bool, err error) {
	d := r.d
	for mid := !r.header && r.members_ == 0; ; mid = true {
		if err := r.ctx.Err(); err != nil {
			return false, err
		}
		if mid {
			if r.stopOut >= 0 {
				if t := d.total(); t == r.stopOut {
					if d.pos() != r.stopIn {
						return false, fmt.Errorf("%w: segment ends at bit %d, index says %d", ErrIndex, d.pos(), r.stopIn)
					}
					return true, nil
				} else if t > r.stopOut {
					return false, fmt.Errorf("%w: no block boundary at output offset %d", ErrIndex, r.stopOut)
				}
			}
			if r.idx != nil && d.total()-r.last >= r.span {
				r.checkpoint()
			}
		}
		final, err := d.block()
		if err != nil {
			return false, err
		}
		if r.stopOut >= 0 && d.total() > r.stopOut && !final {
			return false, fmt.Errorf("%w: no block boundary at output offset %d", ErrIndex, r.stopOut)
		}
		if final {
			return false, nil
		}
	}
}

// checkpoint records the block start the decoder is at, with the history a decode from here needs.
func (r *run) checkpoint() {
	d := r.d
	h := min(histSize, d.op-d.lo)
	w := make([]byte, h)
	copy(w, d.out[d.op-h:d.op])
	r.last = d.total()
	r.idx.Points = append(r.idx.Points, Point{In: d.pos(), Out: r.last, Window: w})
}

// header reads a gzip member header (RFC 1952, 2.3.1), skipping its optional fields.
func (d *decoder) header() error {
	var h [10]byte
	if err := d.readFull(h[:]); err != nil {
		return err
	}
	if h[0] != 0x1f || h[1] != 0x8b || h[2] != 8 {
		return ErrHeader
	}
	flg := h[3]
	if flg&0xe0 != 0 {
		return fmt.Errorf("%w: reserved flags set", ErrHeader)
	}
	if flg&4 != 0 { // FEXTRA
		var x [2]byte
		if err := d.readFull(x[:]); err != nil {
			return err
		}
		for n := binary.LittleEndian.Uint16(x[:]); n > 0; n-- {
			if _, err := d.readByte(); err != nil {
				return err
			}
		}
	}
	for _, f := range []byte{8, 16} { // FNAME, FCOMMENT: zero-terminated
		if flg&f == 0 {
			continue
		}
		for {
			b, err := d.readByte()
			if err != nil {
				return err
			}
			if b == 0 {
				break
			}
		}
	}
	if flg&2 != 0 { // FHCRC
		var x [2]byte
		if err := d.readFull(x[:]); err != nil {
			return err
		}
	}
	return nil
}

// trailer reads a member's CRC-32 and size and checks them when the member's start was seen.
func (d *decoder) trailer() error {
	d.align()
	var t [8]byte
	if err := d.readFull(t[:]); err != nil {
		return err
	}
	if !d.crcOn {
		return nil
	}
	d.crc = crc32Update(d.crc, d.out[d.crcFrom:d.op])
	d.crcFrom = d.op
	size := uint32(d.total() - d.memberStart)
	if binary.LittleEndian.Uint32(t[0:]) != d.crc || binary.LittleEndian.Uint32(t[4:]) != size {
		return ErrChecksum
	}
	return nil
}
