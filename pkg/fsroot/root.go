// Package fsroot is the one confined filesystem layer under warmd's data dir. warmd runs as root on
// every node, and the names it writes come from outside: S3 keys, bundle entries, index files, trees
// that vLLM pods write into hostPath mounts. Everything warmd creates, renames, links or removes below
// its data dir goes through a Root, and a Root takes only validated Paths.
//
// A Root never resolves a name through a symlink: it walks every component from its own directory
// handle with openat(O_PATH|O_DIRECTORY|O_NOFOLLOW), refuses to cross into another mount, and acts on
// the final component itself (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW, unlinkat). A pod that swaps a
// directory for a link between warmd's look and warmd's write meets a refused operation, not a
// write outside; there is no "check, then use" to race. This is stricter than os.Root, which follows
// links that stay inside its directory: below the data dir a pod-written link may point into another
// part of warmd's own tree (another model's weights), so no link is followed at all.
//
// Writes that publish a file go through the one atomic writer (WriteFile, or CreateTemp + Commit):
// a temp file in the same directory, written, fsynced, renamed over the final name, and the directory
// fsynced, as containerd's content store commits an ingest. A crash leaves the old file or the new,
// never a mix, and leaves temps that RemoveTemps sweeps.
//
// Only Linux is supported (warmd runs on Linux nodes).
package fsroot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Sentinels callers branch on; fs.ErrNotExist and fs.ErrExist work as usual through errors.Is.
var (
	// ErrSymlink: a symlink stands where a directory or a file was expected; it was not followed.
	ErrSymlink = errors.New("a symlink is in the way (warmd never follows links below its data dir)")
	// ErrCrossDevice: a component is a mount point; a Root does not leave its filesystem.
	ErrCrossDevice = errors.New("crosses into another mount")
	// ErrTooLarge: ReadFile's size bound was exceeded.
	ErrTooLarge = errors.New("file larger than allowed")
	// ErrNotRegular: a device, FIFO or socket stands where a file was expected.
	ErrNotRegular = errors.New("not a regular file or directory")
)

// Root is a directory every operation stays below. Its methods are safe for concurrent use.
type Root struct {
	dir  string
	fd   int // O_PATH|O_DIRECTORY handle of dir
	dev  uint64
	once sync.Once
}

// Open returns a Root at dir, an absolute path the operator configured (it may itself be or pass
// through a symlink: that is configuration, not outside input). It is created 0o755 if missing.
func Open(dir string) (*Root, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("fsroot: %q is not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fsroot: create %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open root", Path: dir, Err: err}
	}
	return newRoot(dir, fd)
}

func newRoot(dir string, fd int) (*Root, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat root", Path: dir, Err: err}
	}
	return &Root{dir: dir, fd: fd, dev: st.Dev}, nil
}

// Dir returns the Root's absolute directory, for logs and for handing a path to another process
// (containerd, a pod spec); warmd itself never opens names below it by path.
func (r *Root) Dir() string { return r.dir }

// Name returns the absolute path of p below the Root, for logs and messages only.
func (r *Root) Name(p Path) string {
	if p.IsRoot() {
		return r.dir
	}
	return r.dir + "/" + p.s
}

// Close releases the Root's handle. Files opened through it stay usable.
func (r *Root) Close() error {
	var err error
	r.once.Do(func() { err = unix.Close(r.fd) })
	return err
}

// Sub creates p (like MkdirAll with 0o755) and returns a Root confined to it. Close it when done.
func (r *Root) Sub(p Path) (*Root, error) {
	fd, err := r.walk(p.Components(), 0o755, true)
	if err != nil {
		return nil, r.err("open", p, err)
	}
	if fd == r.fd {
		if fd, err = unix.Dup(r.fd); err != nil {
			return nil, r.err("open", p, err)
		}
		unix.CloseOnExec(fd)
	}
	return newRoot(r.Name(p), fd)
}

// walk opens the directory reached by comps from the Root, one component at a time without
// following links or crossing mounts, creating missing ones with perm when mkdir is set. The
// returned fd is an O_PATH handle the caller closes, or r.fd itself (never close that) for none.
func (r *Root) walk(comps []string, perm fs.FileMode, mkdir bool) (int, error) {
	cur := r.fd
	for _, c := range comps {
		next, err := r.step(cur, c, perm, mkdir)
		if cur != r.fd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

func (r *Root) step(dirfd int, name string, perm fs.FileMode, mkdir bool) (int, error) {
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
				return -1, err
			}
			if st.Dev != r.dev {
				unix.Close(fd)
				return -1, ErrCrossDevice
			}
			return fd, nil
		case err == unix.ENOENT && mkdir && attempt < 3:
			if err := unix.Mkdirat(dirfd, name, uint32(perm.Perm())); err != nil && err != unix.EEXIST {
				return -1, err
			}
		case err == unix.ENOTDIR || err == unix.ELOOP:
			return -1, kindOf(dirfd, name, err)
		default:
			return -1, err
		}
	}
}

// kindOf turns ENOTDIR/ELOOP at name into ErrSymlink when a link stands there.
func kindOf(dirfd int, name string, err error) error {
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return ErrSymlink
	}
	return err
}

// parent opens p's directory and returns its handle (close it unless it is r.fd) and p's base name.
func (r *Root) parent(p Path, mkdir bool) (int, string, error) {
	if p.IsRoot() {
		return -1, "", errors.New("the root itself cannot be the target of this operation")
	}
	fd, err := r.walk(p.Dir().Components(), 0o755, mkdir)
	return fd, p.Base(), err
}

func (r *Root) release(fd int) {
	if fd >= 0 && fd != r.fd {
		unix.Close(fd)
	}
}

// err wraps a failure with the operation and the absolute name, as *fs.PathError does. The name
// below the root is cut (ShortName): paths in pod-written trees reach 4,096 bytes, and these errors
// end up in logs and the status.
func (r *Root) err(op string, p Path, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: r.ShortName(p), Err: err}
}

// ShortName is Name for messages: the root's dir and p, with p quoted and cut (Quote) when it is
// longer than 128 bytes, so that a log line or status field carries a bounded name.
func (r *Root) ShortName(p Path) string {
	if len(p.s) <= 128 {
		return r.Name(p)
	}
	return r.dir + "/" + Quote(p.s)
}

// MkdirAll creates p and every missing parent with perm; existing ones must be real directories.
func (r *Root) MkdirAll(p Path, perm fs.FileMode) error {
	fd, err := r.walk(p.Components(), perm, true)
	r.release(fd)
	return r.err("mkdir", p, err)
}

// Mkdir creates p (its parent must exist); fs.ErrExist if it does.
func (r *Root) Mkdir(p Path, perm fs.FileMode) error {
	dfd, base, err := r.parent(p, false)
	if err != nil {
		return r.err("mkdir", p, err)
	}
	defer r.release(dfd)
	return r.err("mkdir", p, unix.Mkdirat(dfd, base, uint32(perm.Perm())))
}

// Open opens p for reading. A link at p is refused (ErrSymlink), and so is anything but a regular
// file or a directory (a FIFO planted by a pod would block a reader forever).
func (r *Root) Open(p Path) (*os.File, error) { return r.OpenFile(p, os.O_RDONLY, 0) }

// OpenFile opens p with flag (os.O_* and unix.O_DIRECT are passed through) and perm for a created
// file. O_NOFOLLOW is always added; the file must be regular or a directory.
func (r *Root) OpenFile(p Path, flag int, perm fs.FileMode) (*os.File, error) {
	var (
		dfd  = r.fd
		base = "."
		err  error
	)
	if !p.IsRoot() {
		if dfd, base, err = r.parent(p, false); err != nil {
			return nil, r.err("open", p, err)
		}
		defer r.release(dfd)
	}
	if !p.IsRoot() {
		// Look before opening, on the entry itself: a device a pod planted is refused without being
		// opened (opening some devices acts), a link is named as such. The fstat after the open
		// below is what decides; this only keeps the open from happening at all.
		var pre unix.Stat_t
		if unix.Fstatat(dfd, base, &pre, unix.AT_SYMLINK_NOFOLLOW) == nil {
			switch pre.Mode & unix.S_IFMT {
			case unix.S_IFREG, unix.S_IFDIR:
			case unix.S_IFLNK:
				return nil, r.err("open", p, ErrSymlink)
			default:
				return nil, r.err("open", p, ErrNotRegular)
			}
		}
	}
	fd, err := unix.Openat(dfd, base, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, uint32(perm.Perm()))
	if err != nil {
		if err == unix.ELOOP || err == unix.ENOTDIR {
			err = kindOf(dfd, base, err)
		}
		return nil, r.err("open", p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, r.err("open", p, err)
	}
	if m := st.Mode & unix.S_IFMT; m != unix.S_IFREG && m != unix.S_IFDIR {
		unix.Close(fd)
		return nil, r.err("open", p, ErrNotRegular)
	}
	if flag&unix.O_NONBLOCK == 0 {
		if err := unix.SetNonblock(fd, false); err != nil {
			unix.Close(fd)
			return nil, r.err("open", p, err)
		}
	}
	return os.NewFile(uintptr(fd), r.Name(p)), nil
}

// Lstat describes p itself (a link is described, not followed).
func (r *Root) Lstat(p Path) (fs.FileInfo, error) {
	var st unix.Stat_t
	if p.IsRoot() {
		if err := unix.Fstat(r.fd, &st); err != nil {
			return nil, r.err("lstat", p, err)
		}
		return newInfo(filepath.Base(r.dir), &st), nil
	}
	dfd, base, err := r.parent(p, false)
	if err != nil {
		return nil, r.err("lstat", p, err)
	}
	defer r.release(dfd)
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, r.err("lstat", p, err)
	}
	return newInfo(base, &st), nil
}

// ReadFile reads the regular file p whole, refusing one larger than max bytes (ErrTooLarge): files
// below the data dir may have been written by a pod or a bucket, so no read is unbounded.
func (r *Root) ReadFile(p Path, max int64) ([]byte, error) {
	f, err := r.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, r.err("read", p, ErrNotRegular)
	}
	if fi.Size() > max {
		return nil, r.err("read", p, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, fi.Size(), max))
	}
	buf, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, r.err("read", p, err)
	}
	if int64(len(buf)) > max {
		return nil, r.err("read", p, fmt.Errorf("%w: grew past the limit of %d bytes", ErrTooLarge, max))
	}
	return buf, nil
}

// ReadDir lists the directory p sorted by name; entries' types are those of the entries themselves.
// The names are raw (a pod may have written them): make each a Path with Path.Child before use.
func (r *Root) ReadDir(p Path) ([]fs.DirEntry, error) {
	f, err := r.OpenFile(p, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	es, err := f.ReadDir(-1)
	sortEntries(es)
	return es, err
}

// Readlink returns the target text of the link at p.
func (r *Root) Readlink(p Path) (string, error) {
	dfd, base, err := r.parent(p, false)
	if err != nil {
		return "", r.err("readlink", p, err)
	}
	defer r.release(dfd)
	buf := make([]byte, MaxPathLen+1)
	n, err := unix.Readlinkat(dfd, base, buf)
	if err != nil {
		return "", r.err("readlink", p, err)
	}
	return string(buf[:n]), nil
}

// Statfs returns the free bytes (available to an unprivileged writer, as root's reserve is not
// warmd's to spend) and the total bytes of the Root's filesystem.
func (r *Root) Statfs() (free, total int64, err error) {
	var s unix.Statfs_t
	if err := unix.Fstatfs(r.fd, &s); err != nil {
		return 0, 0, r.err("statfs", Path{}, err)
	}
	return int64(s.Bavail) * int64(s.Bsize), int64(s.Blocks) * int64(s.Bsize), nil
}

// SyncDir fsyncs the directory p, making renames and creations in it durable.
func (r *Root) SyncDir(p Path) error {
	f, err := r.OpenFile(p, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return r.err("fsync", p, f.Sync())
}
