// Package file is the weights Source for file:///dir/: a local or mounted mirror (air-gapped sites,
// tests). It keeps no checksums, so files are verified by size and the model's sha256 manifest.
package file

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
)

// Source reads one model's files under a directory.
type Source struct{ dir string }

var _ prefetch.Source = (*Source)(nil)

// New returns a Source for u (file:///abs/dir/).
func New(u string) (*Source, error) {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "file" || !filepath.IsAbs(p.Path) {
		return nil, fmt.Errorf("weights source %q is not a file:///absolute/dir/ URL (use three slashes)", u)
	}
	return &Source{dir: filepath.Clean(p.Path)}, nil
}

func (s *Source) String() string { return "file://" + s.dir + "/" }

// List implements prefetch.Source: every regular file below the dir, by relative slash path.
func (s *Source) List(ctx context.Context) ([]objstore.Object, error) {
	var out []objstore.Object
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.dir, p)
		out = append(out, objstore.Object{Key: filepath.ToSlash(rel), Size: fi.Size(), LastModified: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s, err)
	}
	return out, nil
}

func (s *Source) path(name string) (string, error) {
	p := filepath.Join(s.dir, filepath.FromSlash(name))
	if !strings.HasPrefix(p, s.dir+string(filepath.Separator)) {
		return "", fmt.Errorf("%q leaves %s", name, s)
	}
	return p, nil
}

// Head implements prefetch.Source.
func (s *Source) Head(_ context.Context, name string) (objstore.Object, error) {
	p, err := s.path(name)
	if err != nil {
		return objstore.Object{}, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		if os.IsNotExist(err) {
			return objstore.Object{}, fmt.Errorf("%s: %w", p, objstore.ErrNotFound)
		}
		return objstore.Object{}, err
	}
	return objstore.Object{Key: name, Size: fi.Size(), LastModified: fi.ModTime()}, nil
}

// Parts implements prefetch.Source: files have no parts.
func (s *Source) Parts(context.Context, string) ([]objstore.Part, error) { return nil, nil }

// GetRange implements prefetch.Source.
func (s *Source) GetRange(_ context.Context, name string, off, n int64, w io.Writer) (int64, error) {
	p, err := s.path(name)
	if err != nil {
		return 0, err
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p, err)
	}
	defer f.Close()
	m, err := io.Copy(w, io.NewSectionReader(f, off, n))
	if err == nil && m < n {
		err = fmt.Errorf("read %s: %d of %d bytes at %d: %w", p, m, n, off, io.ErrUnexpectedEOF)
	}
	return m, err
}
