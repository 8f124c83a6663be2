package inflate

import "errors"

// A decode table maps the next bits of the stream (read least-significant bit first, as DEFLATE
// stores codes bit-reversed) to an entry. One lookup of the primary table resolves every code up to
// its width; longer codes take one more lookup in a subtable that the primary entry points at. An
// entry is a uint32:
//
//	bits  0-7   the code's full length in bits (what to consume once the entry is final)
//	bits  8-11  extra bits that follow the code (length and distance codes), or a subtable's width
//	bits 12-15  flags: literal, end of block, subtable, invalid
//	bits 16-31  the value: a literal byte, a length or distance base, or a subtable's start index
const (
	fLit     = 1 << 12
	fEOB     = 1 << 13
	fSub     = 1 << 14
	fInvalid = 1 << 15

	litBits  = 11 // primary width of the literal/length table
	distBits = 8  // primary width of the distance table
	lenBits  = 7  // width of the code-length code table (its codes are at most 7 bits: no subtables)

	maxCodeLen = 15
)

var errBadCodes = errors.New("invalid Huffman code lengths")

// Length and distance bases and their extra bits (RFC 1951, 3.2.5).
var (
	lengthBase  = [29]uint32{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lengthExtra = [29]uint32{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase    = [30]uint32{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra   = [30]uint32{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}
)

// kind says how a table's symbols become entries.
type kind int

const (
	kindLitLen kind = iota
	kindDist
	kindCodeLen
)

// entry is what symbol sym of a table of kind k decodes to, before its code length is set.
func entry(k kind, sym int) uint32 {
	switch k {
	case kindLitLen:
		switch {
		case sym < 256:
			return uint32(sym)<<16 | fLit
		case sym == 256:
			return fEOB
		case sym <= 285:
			return lengthBase[sym-257]<<16 | lengthExtra[sym-257]<<8
		}
	case kindDist:
		if sym < 30 {
			return distBase[sym]<<16 | distExtra[sym]<<8
		}
	case kindCodeLen:
		return uint32(sym) << 16
	}
	return fInvalid
}

// reverse returns the low n bits of code in reverse order.
func reverse(code uint32, n uint) uint32 {
	var r uint32
	for i := uint(0); i < n; i++ {
		r = r<<1 | code&1
		code >>= 1
	}
	return r
}

// build fills t (reused across blocks) with the decode table for the code lengths lens, whose primary
// width is bits. Entries no code reaches stay invalid, so an incomplete code fails where it is used,
// not silently; an over-subscribed one fails here.
func build(t []uint32, lens []uint8, bits uint, k kind) ([]uint32, error) {
	var count [maxCodeLen + 1]int
	for _, l := range lens {
		count[l]++
	}
	count[0] = 0
	left := 1
	for l := 1; l <= maxCodeLen; l++ {
		left <<= 1
		left -= count[l]
		if left < 0 {
			return nil, errBadCodes
		}
	}
	// The first code of each length, MSB-first (RFC 1951, 3.2.2).
	var next [maxCodeLen + 1]uint32
	code := uint32(0)
	for l := 1; l <= maxCodeLen; l++ {
		next[l] = code
		code = (code + uint32(count[l])) << 1
	}

	size := 1 << bits
	// The widest code under each primary slot decides that slot's subtable width.
	var subWidth []uint8
	long := false
	for l := int(bits) + 1; l <= maxCodeLen; l++ {
		if count[l] > 0 {
			long = true
		}
	}
	codes := make([]uint32, len(lens))
	{
		n := next
		for sym, l := range lens {
			if l == 0 {
				continue
			}
			codes[sym] = reverse(n[l], uint(l))
			n[l]++
		}
	}
	if long {
		subWidth = make([]uint8, size)
		for sym, l := range lens {
			if uint(l) > bits {
				p := codes[sym] & uint32(size-1)
				if w := l - uint8(bits); w > subWidth[p] {
					subWidth[p] = w
				}
			}
		}
	}
	total := size
	for _, w := range subWidth {
		if w > 0 {
			total += 1 << w
		}
	}
	if cap(t) < total {
		t = make([]uint32, total)
	}
	t = t[:total]
	for i := range t {
		t[i] = fInvalid
	}
	// Subtables follow the primary table; a primary slot with one points at its start.
	off := size
	for p, w := range subWidth {
		if w > 0 {
			t[p] = uint32(off)<<16 | fSub | uint32(w)<<8 | uint32(bits)
			off += 1 << w
		}
	}
	for sym, l := range lens {
		if l == 0 {
			continue
		}
		e := entry(k, sym) | uint32(l)
		r := codes[sym]
		if uint(l) <= bits {
			for i := r; i < uint32(size); i += 1 << l {
				t[i] = e
			}
			continue
		}
		p := t[r&uint32(size-1)]
		base, w := p>>16, (p>>8)&15
		for i := r >> bits; i < 1<<w; i += 1 << (uint(l) - bits) {
			t[base+i] = e
		}
	}
	return t, nil
}

// fixed tables (RFC 1951, 3.2.6), built once.
var fixedLit, fixedDist []uint32

func init() {
	var l [288]uint8
	for i := range l {
		switch {
		case i < 144:
			l[i] = 8
		case i < 256:
			l[i] = 9
		case i < 280:
			l[i] = 7
		default:
			l[i] = 8
		}
	}
	var err error
	if fixedLit, err = build(nil, l[:], litBits, kindLitLen); err != nil {
		panic(err)
	}
	var d [30]uint8
	for i := range d {
		d[i] = 5
	}
	if fixedDist, err = build(nil, d[:], distBits, kindDist); err != nil {
		panic(err)
	}
}
