package inflate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Index is a gzip stream's checkpoints: where DEFLATE blocks start, in bits of the compressed
// stream and bytes of output, with the history each needs. It lets a decode start at any point, so
// the spans between points decode on separate cores. An index says nothing about the data's
// integrity: whoever uses one must still check the output (warmd checks the layer's diff ID), and a
// wrong one fails with ErrIndex or a wrong digest, never silently.
type Index struct {
	// CompressedSize and Size are the stream's lengths, compressed and inflated.
	CompressedSize, Size int64
	// Span is the output distance the points were recorded at.
	Span int64
	// Points are in increasing order of In and Out.
	Points []Point
}

// Point is one checkpoint.
type Point struct {
	// In is the bit offset of a block start; Out the output offset there.
	In, Out int64
	// Window is the output just before Out (32 KiB, or less near a member's start).
	Window []byte
}

// Limits on an index read from outside (a bucket or a peer): an index is hostile until it checks out.
const (
	maxPoints     = 1 << 20
	maxIndexBytes = 1 << 30 // after decompression
)

var indexMagic = []byte("warmd-gzindex\x00\x01")

// ErrBadIndex is returned by UnmarshalIndex for anything that is not a well-formed index.
var ErrBadIndex = errors.New("malformed gzip checkpoint index")

// MarshalBinary encodes the index (zstd-compressed; the windows are most of it).
func (x *Index) MarshalBinary() ([]byte, error) {
	var b bytes.Buffer
	b.Write(indexMagic)
	var tmp [binary.MaxVarintLen64]byte
	put := func(v int64) { b.Write(tmp[:binary.PutUvarint(tmp[:], uint64(v))]) }
	put(x.CompressedSize)
	put(x.Size)
	put(x.Span)
	put(int64(len(x.Points)))
	var in, out int64
	for _, p := range x.Points {
		put(p.In - in)
		put(p.Out - out)
		put(int64(len(p.Window)))
		b.Write(p.Window)
		in, out = p.In, p.Out
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	return enc.EncodeAll(b.Bytes(), nil), nil
}

// UnmarshalIndex decodes and validates an index of a stream of compressedSize bytes. It refuses an
// index whose points are out of order, outside the stream, or carry oversized windows, and it never
// inflates one past maxIndexBytes.
func UnmarshalIndex(p []byte, compressedSize int64) (*Index, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxIndexBytes), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(p, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadIndex, err)
	}
	if !bytes.HasPrefix(raw, indexMagic) {
		return nil, fmt.Errorf("%w: not a warmd gzip index (bad magic)", ErrBadIndex)
	}
	r := bytes.NewReader(raw[len(indexMagic):])
	get := func() int64 {
		v, e := binary.ReadUvarint(r)
		if e != nil || v > 1<<62 {
			err = fmt.Errorf("%w: truncated or out-of-range field", ErrBadIndex)
			return 0
		}
		return int64(v)
	}
	x := &Index{CompressedSize: get(), Size: get(), Span: get()}
	n := get()
	if err != nil {
		return nil, err
	}
	if x.CompressedSize != compressedSize {
		return nil, fmt.Errorf("%w: index is for a %d-byte stream, this one has %d", ErrBadIndex, x.CompressedSize, compressedSize)
	}
	if n > maxPoints {
		return nil, fmt.Errorf("%w: %d points (at most %d)", ErrBadIndex, n, maxPoints)
	}
	x.Points = make([]Point, 0, min(n, 1<<12))
	var in, out int64
	for i := int64(0); i < n; i++ {
		di, do, w := get(), get(), get()
		if err != nil {
			return nil, err
		}
		in, out = in+di, out+do
		switch {
		case di == 0 || do == 0:
			return nil, fmt.Errorf("%w: point %d does not advance", ErrBadIndex, i)
		case in >= compressedSize*8 || out > x.Size:
			return nil, fmt.Errorf("%w: point %d lies past the stream's end", ErrBadIndex, i)
		case w > histSize || w > out:
			return nil, fmt.Errorf("%w: point %d has a %d-byte window", ErrBadIndex, i, w)
		}
		win := make([]byte, w)
		if _, e := io.ReadFull(r, win); e != nil {
			return nil, fmt.Errorf("%w: point %d's window is cut short", ErrBadIndex, i)
		}
		x.Points = append(x.Points, Point{In: in, Out: out, Window: win})
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last point", ErrBadIndex, r.Len())
	}
	return x, nil
}
