// Package file is the weights Source for file:///dir/: a local or mounted mirror (air-gapped sites,
// tests), or a Hugging Face cache snapshot dir (…/models--org--name/snapshots/<rev>/, whose entries
// are all symlinks into ../../blobs/). It keeps no checksums, so files are verified by size and the
// model's sha256 manifest.
//
// The dir itself is configuration: a symlink there is resolved once, when the source is made. What
// is inside is not trusted: names must be safe relative paths (package source), and a file symlink
// is followed only while it stays inside the source dir — for a snapshot dir, inside its HF repo dir
// models--org--name, where the blobs are. Every read goes through an os.Root of that dir, which
// refuses to leave it however the links are swapped meanwhile. Links that lead outside, dangle, or
// name a directory, and anything that is not a regular file, are skipped and reported by name.
package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/hfcache"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights/source"
)

// Source reads one model's files under a directory.
type Source struct {
	dir  string // as configured (cleaned), for String and records
	root string // the resolved dir reads are confined to
	base string // the listed dir relative to root: "." or "snapshots/<rev>"
}

var _ prefetch.Source = (*Source)(nil)

// New returns a Source for u (file:///abs/dir/), resolving a symlinked dir once.
func New(u string) (*Source, error) {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "file" || !filepath.IsAbs(p.Path) {
		return nil, fmt.Errorf("weights source %q is not a file:///absolute/dir/ URL (use three slashes)", u)
	}
	s := &Source{dir: filepath.Clean(p.Path), base: "."}
	resolved, err := filepath.EvalSymlinks(s.dir)
	if err != nil {
		return nil, fmt.Errorf("weights source %s: %w (the dir must exist and be readable)", s, err)
	}
	if fi, err := os.Stat(resolved); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("weights source %s: %s is not a directory", s, resolved)
	}
	s.root = resolved
	if dir, rel, ok := hfcache.IsSnapshotDir(filepath.ToSlash(resolved)); ok {
		// A Hugging Face cache snapshot: its links point into the repo dir's blobs/.
		s.root, s.base = filepath.FromSlash(dir), rel
	}
	return s, nil
}

func (s *Source) String() string { return "file://" + s.dir + "/" }

func (s *Source) open() (*os.Root, error) {
	r, err := os.OpenRoot(s.root)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", s, err)
	}
	return r, nil
}

func (s *Source) full(name string) string {
	if s.base == "." {
		return name
	}
	return s.base + "/" + name
}

// List implements prefetch.Source: every regular file below the dir, and every file symlink that
// stays inside it, by relative slash path.
func (s *Source) List(ctx context.Context) (prefetch.Listing, error) {
	r, err := s.open()
	if err != nil {
		return prefetch.Listing{}, err
	}
	defer r.Close()
	l := source.Lister{Fix: "rename or remove those files in the source dir"}
	err = fs.WalkDir(r.FS(), s.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == s.base {
			return nil
		}
		rel := p
		if s.base != "." {
			rel = strings.TrimPrefix(p, s.base+"/")
		}
		switch t := d.Type(); {
		case t.IsDir():
			return nil
		case t.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			l.Add(rel, objstore.Object{Size: fi.Size(), LastModified: fi.ModTime()})
		case t&fs.ModeSymlink != 0:
			fi, why := s.followLink(r, p)
			if why != "" {
				l.Skip(rel, why)
				return nil
			}
			l.Add(rel, objstore.Object{Size: fi.Size(), LastModified: fi.ModTime()})
		default:
			l.Skip(rel, fmt.Sprintf("not a regular file (%s); skipped", t))
		}
		return nil
	})
	if err != nil {
		return prefetch.Listing{}, fmt.Errorf("list %s: %w", s, err)
	}
	return l.Listing()
}

// followLink stats what the link at p leads to, inside the root only; why says why it is skipped.
func (s *Source) followLink(r *os.Root, p string) (fs.FileInfo, string) {
	fi, err := r.Stat(p)
	switch {
	case err == nil && fi.Mode().IsRegular():
		return fi, ""
	case err == nil && fi.IsDir():
		return nil, "symlink to a directory; skipped (only file links are followed: link the files, or point the source at the dir)"
	case err == nil:
		return nil, fmt.Sprintf("symlink to something that is not a regular file (%s); skipped", fi.Mode().Type())
	case errors.Is(err, fs.ErrNotExist):
		return nil, "dangling symlink; skipped"
	}
	where := "the source dir"
	if s.base != "." {
		where = "the model's Hugging Face cache dir " + path.Base(s.root)
	}
	if t, lerr := r.Readlink(p); lerr == nil && strings.HasPrefix(t, "/") {
		return nil, "absolute symlink; skipped (only relative links that stay inside " + where + " are followed)"
	}
	return nil, "symlink leads outside " + where + "; skipped"
}

// file opens name for reading inside the root and checks it is a regular file (a FIFO would block).
func (s *Source) file(name fsroot.Path) (*os.File, fs.FileInfo, error) {
	r, err := s.open()
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	f, err := r.OpenFile(s.full(name.String()), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("%s in %s: %w", fsroot.Quote(name.String()), s, objstore.ErrNotFound)
		}
		return nil, nil, fmt.Errorf("open %s in %s: %w", fsroot.Quote(name.String()), s, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s in %s is not a regular file", fsroot.Quote(name.String()), s)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// Head implements prefetch.Source.
func (s *Source) Head(_ context.Context, name fsroot.Path) (objstore.Object, error) {
	f, fi, err := s.file(name)
	if err != nil {
		return objstore.Object{}, err
	}
	f.Close()
	return objstore.Object{Key: name.String(), Size: fi.Size(), LastModified: fi.ModTime()}, nil
}

// Parts implements prefetch.Source: files have no parts.
func (s *Source) Parts(context.Context, fsroot.Path) ([]objstore.Part, error) { return nil, nil }

// GetRange implements prefetch.Source.
func (s *Source) GetRange(_ context.Context, name fsroot.Path, off, n int64, w io.Writer) (int64, error) {
	f, _, err := s.file(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	m, err := io.Copy(w, io.NewSectionReader(f, off, n))
	if err == nil && m < n {
		err = fmt.Errorf("read %s in %s: %d of %d bytes at %d: %w", fsroot.Quote(name.String()), s, m, n, off, io.ErrUnexpectedEOF)
	}
	return m, err
}
