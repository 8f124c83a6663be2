package fsroot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// tempMarker is in every temp name CreateTemp makes, so RemoveTemps and readers can tell them apart.
const tempMarker = ".warmd-tmp-"

// IsTemp reports whether a directory entry's name is a temp file of CreateTemp (an unfinished write:
// never a published file, never read as one).
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMarker)
}

// WriteFile is the one atomic writer: data goes to a temp file in p's directory (created with its
// parents if missing), is fsynced, renamed over p and the directory fsynced. Readers see the old
// content or the new, never a partial file, and a crash at any point loses neither.
func (r *Root) WriteFile(p Path, data []byte, perm fs.FileMode) error {
	t, err := r.CreateTemp(p.Dir(), p.Base())
	if err != nil {
		return err
	}
	if _, err := t.Write(data); err != nil {
		t.Abort()
		return r.err("write", p, err)
	}
	if err := t.Chmod(perm); err != nil {
		t.Abort()
		return r.err("chmod", p, err)
	}
	return t.Commit(p)
}

// Temp is a file being written under a temp name in its final directory. Commit publishes it; Abort
// removes it. The directory handle is held, so a pod renaming directories meanwhile cannot redirect
// the commit elsewhere.
type Temp struct {
	*os.File
	r    *Root
	dfd  int
	dir  Path
	name string
	done bool
}

// CreateTemp creates an empty file (mode 0o600 until Chmod) named ".<pattern>.warmd-tmp-<random>" in
// dir, creating dir and its parents if missing.
func (r *Root) CreateTemp(dir Path, pattern string) (*Temp, error) {
	dfd, err := r.walk(dir.Components(), 0o755, true)
	if err != nil {
		return nil, r.err("create temp in", dir, err)
	}
	if dfd == r.fd {
		if dfd, err = unix.Dup(r.fd); err != nil {
			return nil, r.err("create temp in", dir, err)
		}
		unix.CloseOnExec(dfd)
	}
	if len(pattern) > 200 { // keep room for the marker and the random part within NAME_MAX
		pattern = pattern[:200]
	}
	for range 10 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := "." + pattern + tempMarker + hex.EncodeToString(b[:])
		fd, err := unix.Openat(dfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			unix.Close(dfd)
			return nil, r.err("create temp in", dir, err)
		}
		p := dir.Join(Path{s: name})
		return &Temp{File: os.NewFile(uintptr(fd), r.Name(p)), r: r, dfd: dfd, dir: dir, name: name}, nil
	}
	unix.Close(dfd)
	return nil, r.err("create temp in", dir, fs.ErrExist)
}

// Path returns the temp file's own path below the Root.
func (t *Temp) Path() Path { return t.dir.Join(Path{s: t.name}) }

// Commit fsyncs the file, renames it over final (replacing what is there) and fsyncs both
// directories. The Temp is closed afterwards, whatever the outcome; on failure it is removed.
func (t *Temp) Commit(final Path) error { return t.commit(final, 0) }

// CommitNoReplace is Commit that refuses (fs.ErrExist) when final already exists (RENAME_NOREPLACE):
// for content-addressed names, where an existing file is already the same bytes.
func (t *Temp) CommitNoReplace(final Path) error { return t.commit(final, unix.RENAME_NOREPLACE) }

func (t *Temp) commit(final Path, flags uint) error {
	if t.done {
		return errors.New("fsroot: temp already committed or aborted")
	}
	if err := t.Sync(); err != nil {
		t.Abort()
		return t.r.err("fsync", t.Path(), err)
	}
	if err := t.File.Close(); err != nil {
		t.Abort()
		return t.r.err("close", t.Path(), err)
	}
	defer t.finish()
	same := final.Dir() == t.dir
	dfd := t.dfd
	if !same {
		var err error
		if dfd, _, err = t.r.parent(final, true); err != nil {
			unix.Unlinkat(t.dfd, t.name, 0)
			return t.r.err("commit", final, err)
		}
		defer t.r.release(dfd)
	}
	if err := unix.Renameat2(t.dfd, t.name, dfd, final.Base(), flags); err != nil {
		unix.Unlinkat(t.dfd, t.name, 0)
		if err == unix.EEXIST || err == unix.ENOTEMPTY {
			return t.r.err("commit", final, fs.ErrExist)
		}
		return t.r.err("commit", final, err)
	}
	if err := fsyncFD(dfd); err != nil {
		return t.r.err("fsync", final.Dir(), err)
	}
	if !same {
		return t.r.err("fsync", t.dir, fsyncFD(t.dfd))
	}
	return nil
}

// Abort closes and removes the temp file. It is safe to call after Commit (it does nothing then).
func (t *Temp) Abort() error {
	if t.done {
		return nil
	}
	t.File.Close()
	err := unix.Unlinkat(t.dfd, t.name, 0)
	t.finish()
	if err == unix.ENOENT {
		err = nil
	}
	return t.r.err("remove", t.Path(), err)
}

func (t *Temp) finish() {
	if !t.done {
		t.done = true
		unix.Close(t.dfd)
	}
}

// fsyncFD fsyncs a directory given an O_PATH handle (fsync needs a readable one).
func fsyncFD(pathfd int) error {
	fd, err := unix.Openat(pathfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}

// Rename moves old to new (replacing a file at new), then fsyncs the directories involved.
func (r *Root) Rename(old, new Path) error { return r.rename("rename", old, new, 0) }

// RenameNoReplace moves old to new, refusing with fs.ErrExist when new exists.
func (r *Root) RenameNoReplace(old, new Path) error {
	return r.rename("rename", old, new, unix.RENAME_NOREPLACE)
}

// Exchange swaps a and b atomically (RENAME_EXCHANGE): both must exist. Readers see one or the
// other, never neither — how a snapshot of a revision is replaced while pods read it.
func (r *Root) Exchange(a, b Path) error { return r.rename("exchange", a, b, unix.RENAME_EXCHANGE) }

func (r *Root) rename(op string, old, new Path, flags uint) error {
	ofd, obase, err := r.parent(old, false)
	if err != nil {
		return r.err(op, old, err)
	}
	defer r.release(ofd)
	nfd, nbase, err := r.parent(new, true)
	if err != nil {
		return r.err(op, new, err)
	}
	defer r.release(nfd)
	if err := unix.Renameat2(ofd, obase, nfd, nbase, flags); err != nil {
		if flags&unix.RENAME_NOREPLACE != 0 && err == unix.EEXIST {
			err = fs.ErrExist
		}
		return r.err(op, old, err)
	}
	if err := fsyncFD(nfd); err != nil {
		return r.err("fsync", new.Dir(), err)
	}
	if old.Dir() != new.Dir() {
		return r.err("fsync", old.Dir(), fsyncFD(ofd))
	}
	return nil
}

// Link makes new a hard link to the file old (a link at old is linked as the link itself, never
// its target).
func (r *Root) Link(old, new Path) error {
	ofd, obase, err := r.parent(old, false)
	if err != nil {
		return r.err("link", old, err)
	}
	defer r.release(ofd)
	nfd, nbase, err := r.parent(new, true)
	if err != nil {
		return r.err("link", new, err)
	}
	defer r.release(nfd)
	return r.err("link", new, unix.Linkat(ofd, obase, nfd, nbase, 0))
}

// Symlink creates a link at link pointing to target, which SymlinkTarget must accept (relative,
// staying inside the Root). Missing parents of link are created.
func (r *Root) Symlink(target string, link Path) error {
	if err := SymlinkTarget(link, target); err != nil {
		return err
	}
	dfd, base, err := r.parent(link, true)
	if err != nil {
		return r.err("symlink", link, err)
	}
	defer r.release(dfd)
	return r.err("symlink", link, unix.Symlinkat(target, dfd, base))
}

// Chtimes sets p's access and modification times (a link's own, never its target's).
func (r *Root) Chtimes(p Path, atime, mtime time.Time) error {
	dfd, base, err := r.parent(p, false)
	if err != nil {
		return r.err("chtimes", p, err)
	}
	defer r.release(dfd)
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return r.err("chtimes", p, unix.UtimesNanoAt(dfd, base, ts, unix.AT_SYMLINK_NOFOLLOW))
}

// Remove removes the file, link or empty directory p.
func (r *Root) Remove(p Path) error {
	dfd, base, err := r.parent(p, false)
	if err != nil {
		return r.err("remove", p, err)
	}
	defer r.release(dfd)
	err = unix.Unlinkat(dfd, base, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR)
	}
	return r.err("remove", p, err)
}

// RemoveAll removes p and everything below it; a missing p is not an error. It descends by handle
// and never through a link (a link is removed as itself), and it does not enter another mount. The
// Root itself cannot be removed; remove its entries instead.
func (r *Root) RemoveAll(p Path) error {
	dfd, base, err := r.parent(p, false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return r.err("remove", p, err)
	}
	defer r.release(dfd)
	return r.err("remove", p, r.removeAt(dfd, base, 0))
}

// removeAt removes name in the directory dfd and everything below it, by handle.
func (r *Root) removeAt(dfd int, name string, depth int) error {
	if depth > 4096 {
		return errors.New("directory tree too deep")
	}
	for attempt := 0; ; attempt++ {
		err := unix.Unlinkat(dfd, name, 0)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.EISDIR && err != unix.EPERM {
			return err
		}
		fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			return nil
		}
		if err == unix.ENOTDIR || err == unix.ELOOP {
			continue // swapped for a file or a link since: unlink that instead
		}
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return err
		}
		if st.Dev != r.dev {
			unix.Close(fd)
			return ErrCrossDevice
		}
		names, err := readNames(fd)
		if err == nil {
			for _, n := range names {
				if err = r.removeAt(fd, n, depth+1); err != nil {
					break
				}
			}
		}
		unix.Close(fd)
		if err != nil {
			return err
		}
		err = unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.ENOTEMPTY || attempt >= 5 { // something wrote into it meanwhile: go again
			return err
		}
	}
}

// readNames lists a directory's entry names (without . and ..) from a readable handle.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

// RemoveTemps removes the temp files CreateTemp left in dir (a crash between create and commit);
// it returns how many it removed.
func (r *Root) RemoveTemps(dir Path) (int, error) {
	es, err := r.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	n := 0
	for _, e := range es {
		if IsTemp(e.Name()) {
			if err := r.RemoveAll(dir.Join(Path{s: e.Name()})); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// RemoveTempsOf removes the temps WriteFile (or CreateTemp with p's base as pattern) left for p
// alone, for a file whose directory other writers share; it returns how many it removed. Call it
// only where no write of p can be in flight (an owner at its start, under the data dir lock).
func (r *Root) RemoveTempsOf(p Path) (int, error) {
	pattern := p.Base()
	if len(pattern) > 200 {
		pattern = pattern[:200]
	}
	prefix := "." + pattern + tempMarker
	es, err := r.ReadDir(p.Dir())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	n := 0
	for _, e := range es {
		if strings.HasPrefix(e.Name(), prefix) {
			if err := r.RemoveAll(p.Dir().Join(Path{s: e.Name()})); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}
