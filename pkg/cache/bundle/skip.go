package bundle

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/pkg/fsroot"
)

// Why the writer left one file out (SkipError.Kind). Changed and Gone are transient: the file may
// be complete at the next capture. The others are properties of the file: capture reports them.
const (
	SkipChanged  = "changed"     // its size or mtime moved while it was read
	SkipGone     = "gone"        // removed since the scan
	SkipNotPlain = "not-regular" // swapped for a link, a dir or a special file since the scan
	SkipTooLarge = "too-large"   // over Limits.MaxFileBytes
	SkipSparse   = "sparse"      // far more logical bytes than data (IsSparse)
)

// SkipError says one file could not be packed as the caller's scan saw it. Nothing was written for
// it (the bundle as a whole failed): write again without Path. Its message quotes Path cut at 128
// bytes (fsroot.Quote). It matches fs.ErrInvalid (and fs.ErrNotExist for SkipGone).
type SkipError struct {
	Path fsroot.Path
	Kind string
	Err  error
}

func (e *SkipError) Error() string {
	return fmt.Sprintf("bundle %s: %s: %v", fsroot.Quote(e.Path.String()), e.Kind, e.Err)
}

// Unwrap lets callers match fs.ErrInvalid (every skip) and the cause.
func (e *SkipError) Unwrap() []error { return []error{fs.ErrInvalid, e.Err} }

// Transient reports whether the file may be captured as it is once it stops changing.
func (e *SkipError) Transient() bool { return e.Kind == SkipChanged || e.Kind == SkipGone }

func skipped(p fsroot.Path, kind string, err error) error {
	return &SkipError{Path: p, Kind: kind, Err: err}
}

// Limits bound what Write packs from a pod-written tree.
type Limits struct {
	// MaxFileBytes refuses (SkipTooLarge) a file larger than this; zero: no limit.
	MaxFileBytes int64
}

// sparseSlack is the hole size below which a file is never called sparse: file systems leave small
// holes (preallocation, the tail of a file written with pwrite) in ordinary files.
const sparseSlack = 1 << 20

// maxExtents bounds the SEEK_DATA/SEEK_HOLE walk of one file; a file of more extents than this is
// judged by the extents seen plus the rest counted as data.
const maxExtents = 1 << 14

// IsSparse reports whether the file of size bytes behind f (st from its fstat) holds more than half
// its size, and more than 1 MiB, in holes. Such a file is never packed: a bundle would carry its
// logical size in zeros (a 2 GiB file of 16 KiB data restores as 2 GiB on every node) and packing it
// costs a read of every logical byte. Allocated blocks decide when they cover the file (no seek);
// otherwise the data extents are counted with SEEK_DATA/SEEK_HOLE (compressed file systems allocate
// less than the data they hold). f's offset is left at 0.
func IsSparse(f *os.File, size int64, allocated int64) (bool, error) {
	if size <= sparseSlack || !holey(size, allocated) {
		return false, nil
	}
	data, err := DataBytes(f, size)
	if err != nil {
		return false, err
	}
	return holey(size, data), nil
}

func holey(size, data int64) bool { return size-data > max(size/2, sparseSlack) }

// DataBytes counts the bytes of f's first size bytes that lie in data extents. A file system that
// cannot say (no SEEK_DATA) counts all of them as data. f's offset is left at 0.
func DataBytes(f *os.File, size int64) (int64, error) {
	fd := int(f.Fd())
	defer unix.Seek(fd, 0, io.SeekStart)
	var data, off int64
	for n := 0; off < size; n++ {
		if n == maxExtents {
			return data + size - off, nil
		}
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole from off to the end
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return size, nil
		}
		if err != nil {
			return 0, fmt.Errorf("find data extents: %w", err)
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return 0, fmt.Errorf("find data extents: %w", err)
		}
		end = min(end, size)
		if end > start {
			data += end - start
		}
		if end <= off {
			break
		}
		off = end
	}
	return data, nil
}
