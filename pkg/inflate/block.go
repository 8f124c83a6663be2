package inflate

import (
	"encoding/binary"
	"fmt"
)

const (
	litMask  = 1<<litBits - 1
	distMask = 1<<distBits - 1
)

// block decodes one DEFLATE block and reports whether it was the member's last.
func (d *decoder) block() (final bool, err error) {
	h, err := d.getBits(3)
	if err != nil {
		return false, err
	}
	final = h&1 == 1
	switch h >> 1 {
	case 0:
		err = d.stored()
	case 1:
		err = d.huffman(fixedLit, fixedDist)
	case 2:
		if err = d.tables(); err == nil {
			err = d.huffman(d.lit, d.dist)
		}
	default:
		err = fmt.Errorf("%w: reserved block type 3", ErrCorrupt)
	}
	return final, err
}

// stored copies a stored block's bytes straight from the input.
func (d *decoder) stored() error {
	d.align()
	var hdr [4]byte
	if err := d.readFull(hdr[:]); err != nil {
		return err
	}
	n := int(binary.LittleEndian.Uint16(hdr[0:]))
	if uint16(n) != ^binary.LittleEndian.Uint16(hdr[2:]) {
		return fmt.Errorf("%w: stored block length and its complement disagree", ErrCorrupt)
	}
	for n > 0 {
		if d.op >= d.flushAt {
			if err := d.flush(); err != nil {
				return err
			}
		}
		if d.ip >= d.inLen {
			if err := d.fill(); err != nil {
				return err
			}
			if d.ip >= d.inLen {
				return ErrTruncated
			}
		}
		k := min(n, d.inLen-d.ip, d.flushAt+maxMatch-d.op)
		copy(d.out[d.op:], d.in[d.ip:d.ip+k])
		d.op += k
		d.ip += k
		n -= k
	}
	return nil
}

// clOrder is the order code-length code lengths are stored in (RFC 1951, 3.2.7).
var clOrder = [19]int{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

// tables reads a dynamic block's code lengths and builds its literal/length and distance tables.
func (d *decoder) tables() error {
	h, err := d.getBits(14)
	if err != nil {
		return err
	}
	nlit, ndist, nclen := int(h&31)+257, int(h>>5&31)+1, int(h>>10)+4
	if nlit > 286 || ndist > 30 {
		return fmt.Errorf("%w: %d literal/length or %d distance codes", ErrCorrupt, nlit, ndist)
	}
	var cl [19]uint8
	for i := 0; i < nclen; i++ {
		v, err := d.getBits(3)
		if err != nil {
			return err
		}
		cl[clOrder[i]] = uint8(v)
	}
	if d.clen, err = build(d.clen, cl[:], lenBits, kindCodeLen); err != nil {
		return fmt.Errorf("%w: code-length code: %v", ErrCorrupt, err)
	}
	lens := d.lens[:nlit+ndist]
	for i := 0; i < len(lens); {
		if d.nbits < 16 {
			if err := d.refill(); err != nil {
				return err
			}
		}
		e := d.clen[d.bits&(1<<lenBits-1)]
		if e&fInvalid != 0 {
			return fmt.Errorf("%w: bad code-length code", ErrCorrupt)
		}
		n := uint(e & 0xff)
		d.bits >>= n
		d.nbits -= n
		sym := int(e >> 16)
		if sym < 16 {
			lens[i] = uint8(sym)
			i++
			continue
		}
		var rep int
		var val uint8
		switch sym {
		case 16:
			if i == 0 {
				return fmt.Errorf("%w: repeat with no previous length", ErrCorrupt)
			}
			v, _ := d.getBits(2)
			rep, val = 3+int(v), lens[i-1]
		case 17:
			v, _ := d.getBits(3)
			rep = 3 + int(v)
		default:
			v, _ := d.getBits(7)
			rep = 11 + int(v)
		}
		if i+rep > len(lens) {
			return fmt.Errorf("%w: code lengths run past their count", ErrCorrupt)
		}
		for ; rep > 0; rep-- {
			lens[i] = val
			i++
		}
	}
	if lens[256] == 0 {
		return fmt.Errorf("%w: no end-of-block code", ErrCorrupt)
	}
	if d.lit, err = build(d.lit, lens[:nlit], litBits, kindLitLen); err != nil {
		return fmt.Errorf("%w: literal/length code: %v", ErrCorrupt, err)
	}
	if d.dist, err = build(d.dist, lens[nlit:], distBits, kindDist); err != nil {
		return fmt.Errorf("%w: distance code: %v", ErrCorrupt, err)
	}
	return nil
}

// huffman decodes symbols until the end-of-block code. This is the loop a layer's bytes spend their
// time in: it keeps the bit buffer and positions in locals, refills 8 bytes at a time (at least 48
// bits, enough for the longest length/distance pair), and copies matches 8 bytes at a time.
func (d *decoder) huffman(lt, dt []uint32) error {
	bits, nbits := d.bits, d.nbits
	in := d.in[:d.inLen]
	ip, out, op := d.ip, d.out, d.op
	// The primary tables as arrays: indexing them with a masked value needs no bounds check.
	lp, dp := (*[1 << litBits]uint32)(lt), (*[1 << distBits]uint32)(dt)
	save := func() { d.bits, d.nbits, d.ip, d.op = bits, nbits, ip, op }
	load := func() { bits, nbits, ip, out, op, in = d.bits, d.nbits, d.ip, d.out, d.op, d.in[:d.inLen] }
	for {
		if op >= d.flushAt {
			save()
			if err := d.flush(); err != nil {
				return err
			}
			load()
		}
		if nbits < 48 {
			if ip+8 <= len(in) {
				bits |= binary.LittleEndian.Uint64(in[ip:]) << nbits
				ip += int((63 - nbits) >> 3)
				nbits |= 56
			} else {
				save()
				if err := d.refill(); err != nil {
					return err
				}
				load()
			}
		}
		e := lp[bits&litMask]
		if e&fSub != 0 {
			e = lt[e>>16+uint32(bits>>litBits)&(1<<(e>>8&15)-1)]
		}
		n := uint(e & 0xff)
		if e&fLit != 0 {
			bits >>= n
			nbits -= n
			out[op] = byte(e >> 16)
			op++
			// A second literal needs no refill: 48 bits cover two 15-bit codes.
			e = lp[bits&litMask]
			if e&(fSub|fLit) == fLit {
				n = uint(e & 0xff)
				bits >>= n
				nbits -= n
				out[op] = byte(e >> 16)
				op++
			}
			continue
		}
		if e&(fEOB|fInvalid) != 0 {
			if e&fInvalid != 0 || n == 0 {
				return fmt.Errorf("%w: invalid literal/length code", ErrCorrupt)
			}
			bits >>= n
			nbits -= n
			save()
			if d.overrun() {
				return ErrTruncated
			}
			return nil
		}
		bits >>= n
		nbits -= n
		x := uint(e >> 8 & 15)
		length := int(e>>16) + int(bits&(1<<x-1))
		bits >>= x
		nbits -= x

		e = dp[bits&distMask]
		if e&fSub != 0 {
			e = dt[e>>16+uint32(bits>>distBits)&(1<<(e>>8&15)-1)]
		}
		if e&fInvalid != 0 {
			return fmt.Errorf("%w: invalid distance code", ErrCorrupt)
		}
		n = uint(e & 0xff)
		bits >>= n
		nbits -= n
		x = uint(e >> 8 & 15)
		dist := int(e>>16) + int(bits&(1<<x-1))
		bits >>= x
		nbits -= x
		if dist > op-d.lo {
			return fmt.Errorf("%w: distance %d reaches before the start of the stream", ErrCorrupt, dist)
		}
		src := op - dist
		switch {
		case dist >= 8:
			for i := 0; i < length; i += 8 {
				binary.LittleEndian.PutUint64(out[op+i:], binary.LittleEndian.Uint64(out[src+i:]))
			}
		case dist == 1:
			b := out[src]
			s := out[op : op+length]
			for i := range s {
				s[i] = b
			}
		default:
			for i := 0; i < length; i++ {
				out[op+i] = out[src+i]
			}
		}
		op += length
	}
}
