package containerd

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/continuity/fs"
	"golang.org/x/sys/unix"
)

// Layers on the warmd path are applied side by side, each into a parentless snapshot, and rebased
// onto their parents at commit. One thing the daemon's serial applier does depends on the layers
// below: a directory a layer's tar does not list but needs (an implicit parent, "bin" for
// "bin/su") is created with the owner, mode and xattrs of the same directory in the nearest lower
// layer that has it (archive.Apply's WithParents). Applied without parents it would be root:root
// 0755, and in the merged view it would hide the lower one's owner and mode.
//
// implicitDirs records, while a layer is applied, every directory archive.Apply is about to create
// as an implicit parent (its Filter runs for each header just before the applier resolves the
// header's parent and creates what is missing, so the same resolution against the same tree says
// exactly which). Once the layer's parent chain is committed, fixup gives those directories what
// the serial applier would have copied from the lower layers. Where that cannot be reproduced
// exactly after the fact (a lower directory that is setgid or carries a default ACL changes what is
// created inside it; more implicit directories than we keep track of), fixup says so and the layer
// is applied again the serial way, onto its committed parent.
type implicitDirs struct {
	root       string          // the snapshot directory the layer is applied into
	dirs       []string        // absolute paths, in the order the applier creates them
	seen       map[string]bool // dirs, as a set
	explicit   map[string]bool // implicit dirs a later header of the same tar describes
	bytes      int             // of the paths in dirs
	overflow   bool
	unrecorded bool // the layer was applied by the daemon, which says nothing of its parents
}

// What one layer's recorder keeps at most, in directories and in bytes of their paths; a tar that
// needs more is applied the serial way (variables so tests can make them small).
var (
	maxImplicitDirs  = 1 << 16
	maxImplicitBytes = 16 << 20
)

func newImplicitDirs(root string) *implicitDirs {
	return &implicitDirs{root: filepath.Clean(root), seen: map[string]bool{}, explicit: map[string]bool{}}
}

// filter is archive.Apply's Filter: it accepts every header and records the parents the applier is
// about to create for it, resolving the header's directory as the applier does.
func (r *implicitDirs) filter(hdr *tar.Header) (bool, error) {
	if r.overflow {
		return true, nil // the layer is applied again anyway
	}
	ppath, base := filepath.Split(hdr.Name) // the applier has cleaned the name
	rp, err := fs.RootPath(r.root, ppath)
	if err != nil {
		return true, nil // the applier fails on the same resolution and says why
	}
	path := filepath.Join(rp, filepath.Join("/", base))
	if path == r.root {
		return true, nil
	}
	if hdr.Typeflag == tar.TypeDir && r.seen[path] {
		r.explicit[path] = true
	}
	if rp == r.root {
		return true, nil
	}
	parent := rp
	if base == "" {
		parent = filepath.Dir(path)
	}
	var missing []string // deepest first
	for p := parent; len(p) > len(r.root); p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		if r.seen[p] {
			continue // created before, removed by a later entry, about to be created again
		}
		if len(r.dirs) == maxImplicitDirs || r.bytes+len(p) > maxImplicitBytes {
			r.overflow = true
			return true, nil
		}
		r.seen[p] = true
		r.dirs = append(r.dirs, p)
		r.bytes += len(p)
	}
	return true, nil
}

// errRedoSerial says a layer's implicit parents cannot be given their lower layers' attributes after
// the fact; the caller applies the layer again onto its committed parent.
var errRedoSerial = errors.New("the layer needs the serial apply")

// fixup gives each implicit parent what archive.Apply's mkparent copies from the first of lowers
// (top layer first, as an overlay's lowerdir lists them) that has the path: owner, mode and access
// time (unless a later header of the tar set them), and the xattrs but trusted.* ones. A path that
// is not a directory in that lower layer keeps 0755, as there. The modification time stays the
// unpack's, as the serial apply leaves it once files are created inside.
func (r *implicitDirs) fixup(lowers []string) error {
	if r.overflow {
		return fmt.Errorf("%w: more implicit parent directories than kept track of (%d, %d bytes of paths)", errRedoSerial, maxImplicitDirs, maxImplicitBytes)
	}
	for _, path := range r.dirs {
		fi, err := os.Lstat(path)
		if err != nil || !fi.IsDir() {
			continue // removed or replaced later in the same tar
		}
		rel := path[len(r.root):]
		for _, lower := range lowers {
			lp, err := fs.RootPath(lower, rel)
			if err != nil {
				return fmt.Errorf("resolve %s in a lower layer: %w", rel, err)
			}
			lfi, err := os.Lstat(lp)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("stat %s in a lower layer: %w", rel, err)
			}
			if !lfi.IsDir() {
				break // replaced: the applier keeps its defaults
			}
			if err := r.copyFrom(path, lp, lfi); err != nil {
				return err
			}
			break
		}
	}
	return nil
}

// copyFrom copies one lower directory's attributes onto the implicit parent path.
func (r *implicitDirs) copyFrom(path, lower string, lfi os.FileInfo) error {
	if lfi.Mode()&os.ModeSetgid != 0 {
		// Whatever the serial apply created inside it inherited its group (and subdirectories the
		// setgid bit); that is not reproduced here.
		return fmt.Errorf("%w: lower directory %s is setgid", errRedoSerial, path[len(r.root):])
	}
	names, err := listXattrs(lower)
	if err != nil {
		return err
	}
	for _, name := range names {
		if strings.HasPrefix(name, "system.posix_acl_default") {
			// The serial apply's files inside it took their ACLs from this one.
			return fmt.Errorf("%w: lower directory %s has a default ACL", errRedoSerial, path[len(r.root):])
		}
	}
	if !r.explicit[path] {
		st := lfi.Sys().(*syscall.Stat_t)
		if err := os.Lchown(path, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("chown implicit parent %s: %w", path, err)
		}
		if err := os.Chmod(path, lfi.Mode()); err != nil {
			return fmt.Errorf("chmod implicit parent %s: %w", path, err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(st.Atim.Nano()), {Nsec: unix.UTIME_OMIT}}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("utime implicit parent %s: %w", path, err)
		}
	}
	for _, name := range names {
		if strings.HasPrefix(name, "trusted.") {
			continue
		}
		v, err := getXattr(lower, name)
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read xattr %q of a lower directory: %w", name, err)
		}
		err = unix.Lsetxattr(path, name, v, unix.XATTR_CREATE)
		if err != nil && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("set xattr %q on implicit parent %s: %w", name, path, err)
		}
	}
	return nil
}

// listXattrs lists path's xattr names (none where the filesystem has none).
func listXattrs(path string) ([]string, error) {
	for size := 1024; size <= 1<<20; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Llistxattr(path, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.ENODATA) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list xattrs of %s: %w", path, err)
		}
		var names []string
		for _, s := range strings.Split(string(buf[:n]), "\x00") {
			if s != "" {
				names = append(names, s)
			}
		}
		return names, nil
	}
	return nil, fmt.Errorf("list xattrs of %s: the list is over 1 MiB", path)
}

// getXattr reads one xattr (at most 64 KiB, the kernel's limit for a value).
func getXattr(path, name string) ([]byte, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Lgetxattr(path, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// lowerDirs are the layer directories under a view's mounts, top layer first.
func lowerDirs(ms []mount.Mount) []string {
	for _, m := range ms {
		for _, o := range m.Options {
			if v, ok := strings.CutPrefix(o, "lowerdir="); ok {
				return strings.Split(v, ":")
			}
		}
		if m.Type == "bind" {
			return []string{m.Source}
		}
	}
	return nil
}
