package fsroot

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// WalkFunc is called for every entry below the walked path, parents before children, in name order.
// p is the entry's Path. For an entry whose name is not a valid Path (a pod can write names with
// control characters, backslashes or bytes that are not UTF-8), p is its directory's Path and err
// wraps ErrUnsafePath: return nil to skip it, or an error to stop. For a directory MaxWalkDepth
// levels below the walked path, fn is called a second time, with the directory's own Path and an
// err wrapping ErrTooDeep: return nil to skip its contents, or an error to stop. Returning
// fs.SkipDir for a directory skips its contents; fs.SkipAll stops the walk without an error.
type WalkFunc func(p Path, d fs.DirEntry, err error) error

// MaxWalkDepth is how many directory levels WalkDir enters below the walked path. Every level holds
// one open descriptor while the walk is below it, so a pod-written tree thousands of levels deep would
// otherwise exhaust the process's descriptors; no tree warmd reads (compile caches, snapshots) comes
// near it.
const MaxWalkDepth = 128

// ErrTooDeep is what WalkDir passes to fn for a directory at MaxWalkDepth: its contents are not walked.
var ErrTooDeep = fmt.Errorf("directory more than %d levels deep", MaxWalkDepth)

// WalkDir walks the tree below p (p itself is not passed to fn). It never follows a link (links are
// reported as links), never enters another mount, and reads each directory through a handle opened
// from its parent's handle, so renaming directories during the walk cannot send it elsewhere.
func (r *Root) WalkDir(p Path, fn WalkFunc) error {
	f, err := r.OpenFile(p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return r.err("walk", p, err)
	}
	err = r.walkFD(fd, p, fn, 0)
	unix.Close(fd)
	if errors.Is(err, fs.SkipAll) {
		return nil
	}
	return err
}

func (r *Root) walkFD(fd int, dir Path, fn WalkFunc, depth int) error {
	names, err := readNames(fd)
	if err != nil {
		return r.err("walk", dir, err)
	}
	slices.Sort(names)
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				continue // removed since the listing
			}
			return r.err("walk", dir, err)
		}
		d := dirEntry{info: newInfo(name, &st)}
		child, perr := dir.Child(name)
		if perr != nil {
			if err := fn(dir, d, perr); err != nil {
				return err
			}
			continue
		}
		err := fn(child, d, nil)
		if err == fs.SkipDir {
			continue
		}
		if err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if st.Dev != r.dev {
			return r.err("walk", child, ErrCrossDevice)
		}
		if depth+1 >= MaxWalkDepth {
			if err := fn(child, d, ErrTooDeep); err != nil && err != fs.SkipDir {
				return err
			}
			continue
		}
		cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
			continue // swapped or removed since the stat: it is not the directory we saw
		}
		if err != nil {
			return r.err("walk", child, err)
		}
		err = r.walkFD(cfd, child, fn, depth+1)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// info is an fs.FileInfo from a stat of the entry itself.
type info struct {
	name string
	st   unix.Stat_t
}

func newInfo(name string, st *unix.Stat_t) *info { return &info{name: name, st: *st} }

func (i *info) Name() string       { return i.name }
func (i *info) Size() int64        { return i.st.Size }
func (i *info) ModTime() time.Time { return time.Unix(i.st.Mtim.Sec, i.st.Mtim.Nsec) }
func (i *info) IsDir() bool        { return i.Mode().IsDir() }
func (i *info) Sys() any           { return &i.st }
func (i *info) Mode() fs.FileMode {
	m := fs.FileMode(i.st.Mode & 0o777)
	switch i.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if i.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if i.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if i.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// dirEntry is an fs.DirEntry backed by the stat WalkDir already made.
type dirEntry struct{ info *info }

func (d dirEntry) Name() string               { return d.info.name }
func (d dirEntry) IsDir() bool                { return d.info.IsDir() }
func (d dirEntry) Type() fs.FileMode          { return d.info.Mode().Type() }
func (d dirEntry) Info() (fs.FileInfo, error) { return d.info, nil }

func sortEntries(es []fs.DirEntry) {
	slices.SortFunc(es, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
}
