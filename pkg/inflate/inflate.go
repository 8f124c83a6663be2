// Package inflate is warmd's own gzip decoder: DEFLATE (RFC 1951) in gzip members (RFC 1952), written
// for the one job that bounds a fresh node's image pull, inflating a multi-GB layer.
//
// It exists because every container tool hands that job to one core: the daemon's Go decoder runs at
// about 210 MB/s here, and no host package can be assumed (containerd uses igzip or unpigz only when
// they are on its PATH). This decoder works on large input buffers with a 64-bit bit buffer and
// one-lookup Huffman tables, and it can do what a stream decoder cannot: record checkpoints (the bit
// offset of a block start and the 32 KiB of history before it, as zlib's zran and SOCI's ztoc do) on
// the first, serial pass, and then decode the spans between checkpoints on every core at once.
//
// Output comes in Chunks from a bounded Pool, so a decode never holds more memory than its pool, and a
// consumer that falls behind slows the decoder instead of growing a queue.
package inflate

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Errors a stream can fail with; each names what was wrong with the input.
var (
	ErrCorrupt   = errors.New("corrupt deflate data")
	ErrHeader    = errors.New("not a gzip member (bad magic or header)")
	ErrChecksum  = errors.New("gzip member's CRC-32 or size does not match its data")
	ErrTruncated = errors.New("gzip stream ends early")
	ErrTooLarge  = errors.New("stream inflates past its limit (a decompression bomb?)")
	ErrIndex     = errors.New("checkpoint index does not match the stream")
)

const (
	histSize = 32 << 10 // DEFLATE's window
	maxMatch = 258
	// slack past the flush mark: one more symbol's match plus the 8-byte overrun of word copies.
	outSlack = maxMatch + 16
	inSize   = 1 << 20 // input buffer
	inMin    = 64 << 10
	inKeep   = 16 // bytes kept before the read position when the input buffer is compacted
)

// decoder is one inflate run: the input window over src, the bit buffer, and the current chunk.
type decoder struct {
	ctx   context.Context
	src   io.Reader
	in    []byte
	inLen int
	ip    int
	base  int64 // absolute input offset of in[0]
	eof   bool
	pad   int // zero bytes fed into the bit buffer past the end of the input
	bits  uint64
	nbits uint

	pool    *Pool
	out     []byte
	op      int
	lo      int // lowest index of out a match may reach (the member's start when it is in out)
	from    int // first byte of out not yet emitted
	flushAt int
	emit    func(*Chunk) error
	outBase int64 // output bytes before out[from]
	limit   int64 // ErrTooLarge past this many output bytes; 0 for none

	crc         uint32
	crcFrom     int   // first byte of out not yet in crc
	crcOn       bool  // the member's start was seen, so its CRC-32 and size can be checked
	memberStart int64 // total() when the current member began

	lit, dist, clen []uint32
	lens            [320]uint8
}

// newDecoder starts a decode of src, whose compressed size is srcSize when known (else 0): a stream
// smaller than the input buffer gets a buffer its size (64 KiB at least), so a small layer does not
// cost a whole MiB.
func newDecoder(ctx context.Context, src io.Reader, srcSize, base int64, pool *Pool, emit func(*Chunk) error, limit int64) (*decoder, error) {
	inCap := inSize
	if srcSize > 0 && srcSize+inKeep < inSize {
		inCap = max(int(srcSize)+inKeep, inMin)
	}
	d := &decoder{ctx: ctx, src: src, base: base, in: make([]byte, inCap+8), pool: pool, emit: emit, limit: limit}
	var err error
	if d.out, err = pool.get(ctx); err != nil {
		return nil, err
	}
	d.flushAt = len(d.out) - outSlack
	return d, nil
}

// total is the output so far, emitted or not.
func (d *decoder) total() int64 { return d.outBase + int64(d.op-d.from) }

// pos is the absolute bit offset of the next unread bit.
func (d *decoder) pos() int64 { return (d.base+int64(d.ip+d.pad))*8 - int64(d.nbits) }

// fill reads more input, keeping inKeep bytes before ip so the bit buffer's bytes can be unread.
func (d *decoder) fill() error {
	if d.eof {
		return nil
	}
	if d.ip > inKeep {
		drop := d.ip - inKeep
		copy(d.in, d.in[drop:d.inLen])
		d.inLen -= drop
		d.ip -= drop
		d.base += int64(drop)
	}
	for inCap := len(d.in) - 8; d.inLen < inCap && !d.eof; {
		n, err := d.src.Read(d.in[d.inLen:inCap])
		d.inLen += n
		if err == io.EOF {
			d.eof = true
		} else if err != nil {
			return fmt.Errorf("read compressed stream: %w", err)
		}
		if n > 0 && d.inLen-d.ip >= 64<<10 {
			break
		}
	}
	return nil
}

// refill makes at least 48 bits available, reading input or, at its end, feeding zeros that must
// never be consumed.
func (d *decoder) refill() error {
	for d.nbits < 48 {
		if d.ip+8 <= d.inLen {
			d.bits |= binary.LittleEndian.Uint64(d.in[d.ip:]) << d.nbits
			d.ip += int((63 - d.nbits) >> 3)
			d.nbits |= 56
			return nil
		}
		if !d.eof {
			if err := d.fill(); err != nil {
				return err
			}
			if d.ip+8 <= d.inLen || !d.eof {
				continue
			}
		}
		if d.ip < d.inLen {
			d.bits |= uint64(d.in[d.ip]) << d.nbits
			d.ip++
		} else {
			if d.pad > 8 {
				return ErrTruncated
			}
			d.pad++
		}
		d.nbits += 8
	}
	return nil
}

// overrun says whether the bits consumed so far reach past the real input.
func (d *decoder) overrun() bool {
	return d.pos() > (d.base+int64(d.inLen))*8
}

// getBits returns the next n (≤ 32) bits.
func (d *decoder) getBits(n uint) (uint32, error) {
	if d.nbits < n {
		if err := d.refill(); err != nil {
			return 0, err
		}
	}
	v := uint32(d.bits & (1<<n - 1))
	d.bits >>= n
	d.nbits -= n
	return v, nil
}

// align drops the bits up to the next byte boundary and unreads whole bytes left in the bit buffer,
// so byte-level reads (stored blocks, gzip headers and trailers) start at the right byte.
func (d *decoder) align() {
	d.bits >>= d.nbits & 7
	d.nbits -= d.nbits & 7
	k := int(d.nbits >> 3)
	p := min(k, d.pad)
	d.pad -= p
	d.ip -= k - p
	d.bits, d.nbits = 0, 0
}

// byteAt reads one input byte after align.
func (d *decoder) readByte() (byte, error) {
	if d.ip >= d.inLen {
		if err := d.fill(); err != nil {
			return 0, err
		}
		if d.ip >= d.inLen {
			return 0, ErrTruncated
		}
	}
	b := d.in[d.ip]
	d.ip++
	return b, nil
}

func (d *decoder) readFull(p []byte) error {
	for i := range p {
		b, err := d.readByte()
		if err != nil {
			return err
		}
		p[i] = b
	}
	return nil
}

// atEOF says, after align, whether the input is used up.
func (d *decoder) atEOF() (bool, error) {
	if d.ip < d.inLen {
		return false, nil
	}
	if err := d.fill(); err != nil {
		return false, err
	}
	return d.ip >= d.inLen, nil
}

// flush emits what out holds past the last emit and starts a new chunk whose front holds the last
// 32 KiB of history.
func (d *decoder) flush() error {
	if d.crcOn {
		d.crc = crc32Update(d.crc, d.out[d.crcFrom:d.op])
	}
	if d.limit > 0 && d.total() > d.limit {
		return ErrTooLarge
	}
	d.outBase = d.total()
	next, err := d.pool.get(d.ctx)
	if err != nil {
		return err
	}
	h := min(histSize, d.op-d.lo)
	copy(next, d.out[d.op-h:d.op])
	c := &Chunk{Data: d.out[d.from:d.op], buf: d.out, pool: d.pool}
	d.out, d.op, d.lo, d.from, d.crcFrom = next, h, 0, h, h
	if len(c.Data) == 0 {
		c.Release()
		return nil
	}
	return d.emit(c)
}

// finish emits the last chunk.
func (d *decoder) finish() error {
	if d.limit > 0 && d.total() > d.limit {
		return ErrTooLarge
	}
	d.outBase = d.total()
	c := &Chunk{Data: d.out[d.from:d.op], buf: d.out, pool: d.pool}
	d.out = nil
	if len(c.Data) == 0 {
		c.Release()
		return nil
	}
	return d.emit(c)
}

// release returns the current chunk's buffer after a failure.
func (d *decoder) release() {
	if d.out != nil {
		d.pool.put(d.out)
		d.out = nil
	}
}
