package containerd

import (
	"bytes"
	"strconv"
)

// tarCutter follows a raw tar stream block by block to find where whole entries end, so a layer can
// be handed to the daemon as several smaller tar streams that apply, one after the other onto the
// same snapshot, exactly as the whole would. It never changes a byte: cuts fall only between entry
// groups (a PAX or GNU long-name header stays with the entry it describes), and after a global PAX
// header, which applies to every later entry, it stops cutting.
type tarCutter struct {
	blk     [512]byte
	n       int   // bytes of blk filled
	skip    int64 // data and padding bytes left in the current entry
	pax     []byte
	inPax   bool
	paxSize int64 // size from a PAX header for the next entry, or -1
	ext     bool  // reading GNU sparse extension blocks
	extSize int64 // the sparse entry's stored size
	done    bool  // end of archive or a global header: no more cuts
	end     bool  // the next position is an entry boundary
}

func newTarCutter() *tarCutter { return &tarCutter{paxSize: -1} }

// next consumes a prefix of p and reports its length and whether the stream position after it is
// an entry boundary (where a chunk may end).
func (c *tarCutter) next(p []byte) (int, bool) {
	if c.done {
		return len(p), false
	}
	used := 0
	for used < len(p) {
		if c.skip > 0 {
			k := int(min(int64(len(p)-used), c.skip))
			if c.inPax && len(c.pax) < 1<<20 {
				c.pax = append(c.pax, p[used:used+k]...)
			}
			used += k
			c.skip -= int64(k)
			if c.skip == 0 {
				if c.inPax {
					c.parsePax()
				}
				if c.end {
					c.end = false
					return used, true
				}
			}
			continue
		}
		k := copy(c.blk[c.n:], p[used:])
		c.n += k
		used += k
		if c.n < len(c.blk) {
			return used, false
		}
		c.n = 0
		if c.header() {
			return used, true
		}
		if c.done {
			return len(p), false
		}
	}
	return used, false
}

// header interprets a full block; it returns true when the block itself ends an entry group (a
// header-only entry).
func (c *tarCutter) header() bool {
	b := &c.blk
	if c.ext {
		c.ext = b[504] != 0
		if !c.ext {
			return c.setData(c.paxOr(c.extSize))
		}
		return false
	}
	if bytes.Count(b[:], []byte{0}) == len(b) {
		c.done = true // end of archive
		return false
	}
	if !checksumOK(b) {
		c.done = true // not a header we understand: stop cutting, the layer goes whole
		return false
	}
	size := octal(b[124:136])
	switch tf := b[156]; tf {
	case 'g':
		c.done = true
		return false
	case 'x':
		c.inPax, c.pax = true, c.pax[:0]
		c.skip = pad(size)
		return false
	case 'L', 'K':
		c.skip = pad(size)
		return false
	case 'S':
		if b[482] != 0 {
			c.ext = true
			c.extSize = size
			return false
		}
		return c.setData(c.paxOr(size))
	case '1', '2', '3', '4', '5', '6':
		c.paxSize = -1
		return true
	default:
		return c.setData(c.paxOr(size))
	}
}

func (c *tarCutter) paxOr(size int64) int64 {
	if c.paxSize >= 0 {
		size = c.paxSize
	}
	c.paxSize = -1
	return size
}

// setData starts skipping the entry's data; a zero-length entry ends right away.
func (c *tarCutter) setData(size int64) bool {
	c.skip = pad(size)
	if c.skip == 0 {
		return true
	}
	c.end = true
	return false
}

// parsePax reads the "size" record of a PAX header ("<len> size=<n>\n").
func (c *tarCutter) parsePax() {
	c.inPax = false
	for rec := c.pax; len(rec) > 0; {
		sp := bytes.IndexByte(rec, ' ')
		if sp <= 0 {
			break
		}
		n, err := strconv.Atoi(string(rec[:sp]))
		if err != nil || n <= sp || n > len(rec) {
			break
		}
		kv := rec[sp+1 : n]
		if v, ok := bytes.CutPrefix(kv, []byte("size=")); ok {
			if s, err := strconv.ParseInt(string(bytes.TrimSuffix(v, []byte("\n"))), 10, 64); err == nil && s >= 0 {
				c.paxSize = s
			}
		}
		rec = rec[n:]
	}
}

// checksumOK verifies a header block's checksum (unsigned sum with the checksum field as spaces).
func checksumOK(b *[512]byte) bool {
	want := octal(b[148:156])
	var sum int64
	for i, x := range b {
		if i >= 148 && i < 156 {
			x = ' '
		}
		sum += int64(x)
	}
	return sum == want
}

func pad(size int64) int64 { return (size + 511) &^ 511 }

// octal parses a tar numeric field (octal text or GNU base-256).
func octal(f []byte) int64 {
	if len(f) > 0 && f[0]&0x80 != 0 {
		var v int64
		for i, x := range f {
			if i == 0 {
				x &= 0x7f
			}
			v = v<<8 | int64(x)
		}
		return v
	}
	s := string(bytes.Trim(f, " \x00"))
	v, err := strconv.ParseInt(s, 8, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}
