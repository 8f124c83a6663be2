package bundle

import (
	"errors"
	"fmt"
	"io"
)

// Default reader limits: far above any real compile cache bundle (capture cuts them at 64 MiB and
// 4,096 files), far below what would fill a node's disk.
const (
	DefaultMaxBytes   = 16 << 30
	DefaultMaxEntries = 1 << 16
	maxManifestBytes  = 64 << 20
	maxWindow         = 1 << 23 // our writer uses 4 MiB windows; a bigger one only costs memory
	// entryOverhead is what one entry may add to the tar stream beyond its data: the header, a PAX
	// header for a long name (up to 4 KiB of path plus its record), and the padding of both.
	entryOverhead = 16 << 10
	// spaceEvery is how many bytes are written between two free-space checks inside one file.
	spaceEvery = 32 << 20
)

// ErrNoSpace marks an extraction stopped because it would leave less free space on the tree's file
// system than the reserve: nothing of the bundle is kept.
var ErrNoSpace = errors.New("not enough free disk space for the bundle")

// DefaultReserve is the free space an extraction leaves on a file system of total bytes when
// Options.Reserve is zero: 2 % of it, at least 256 MiB and at most 32 GiB. A compile cache is a
// cache; it must never be the reason the node's kubelet, image store or pods' scratch run dry.
func DefaultReserve(total int64) int64 {
	return min(max(total/50, 256<<20), 32<<30)
}

// budget counts what one extraction materialises (the sum of its files' logical sizes, which is what
// lands on disk whatever the tar or zstd stream claims) and keeps free space above the reserve.
type budget struct {
	maxBytes, maxEntry int64
	used               int64 // bytes of files admitted so far
	statfs             func() (free, total int64, err error)
	reserve            int64
	sinceCheck         int64
}

// admit reserves size bytes for one file before any of it is written.
func (b *budget) admit(name string, size int64) error {
	if size > b.maxEntry {
		return fmt.Errorf("%w: %s declares %d bytes, more than the %d a bundle entry may hold", ErrTooLarge, quote(name), size, b.maxEntry)
	}
	if b.used+size > b.maxBytes {
		return fmt.Errorf("%w: %s would bring the bundle to %d bytes, more than its limit of %d", ErrTooLarge, quote(name), b.used+size, b.maxBytes)
	}
	if err := b.space(size); err != nil {
		return err
	}
	b.used += size
	return nil
}

// space checks that need more bytes still leave the reserve free.
func (b *budget) space(need int64) error {
	b.sinceCheck = 0
	if b.statfs == nil {
		return nil
	}
	free, total, err := b.statfs()
	if err != nil {
		return fmt.Errorf("extract: check free space: %w", err)
	}
	reserve := b.reserve
	if reserve <= 0 {
		reserve = DefaultReserve(total)
	}
	if free-need < reserve {
		return fmt.Errorf("%w: %d bytes free, %d more needed, %d must stay free (free space on the data dir's file system, or lower compileCache.budget)",
			ErrNoSpace, free, need, reserve)
	}
	return nil
}

// spaceWriter re-checks free space every spaceEvery bytes of one big file: pods write to the same
// file system while a bundle extracts.
type spaceWriter struct {
	w io.Writer
	b *budget
}

func (s *spaceWriter) Write(p []byte) (int, error) {
	if s.b.sinceCheck += int64(len(p)); s.b.sinceCheck >= spaceEvery {
		if err := s.b.space(0); err != nil {
			return 0, err
		}
	}
	return s.w.Write(p)
}

// limitReader caps the decompressed stream. Entries admitted by the budget raise it; what is left
// over is headers and padding, so a stream of trailing zeros or giant headers stops early.
type limitReader struct {
	r    io.Reader
	left int64
	read int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// Probe one byte: a stream that ends exactly at the limit is fine.
		var one [1]byte
		if n, err := l.r.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("%w: decompressed stream larger than its entries account for", ErrTooLarge)
		} else {
			return 0, err
		}
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	l.read += int64(n)
	return n, err
}

// quote renders a name that passed checkName (or ParseManifest) for an error message: quoted, and
// cut at 128 bytes. A name that did not pass is never shown; errors name its entry's index instead.
func quote(name string) string {
	const max = 128
	if len(name) > max {
		return fmt.Sprintf("%q…", name[:max])
	}
	return fmt.Sprintf("%q", name)
}
