package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"warmd.io/warmd/pkg/cache/bundle"
	"warmd.io/warmd/pkg/fsroot"
)

// Imported is what one import did.
type Imported struct {
	Record Record
	// Written files are new; Existing ones were already there with equal content; Conflicts are
	// paths where a different file was kept.
	Written, Existing int
	Conflicts         []string
}

// Import extracts a bundle file (from `warmd cache export` on another cluster) into the tree, with
// the same checks as a restore: this SKU only, every entry's digest, the manifest, safe paths, size
// limits and free space. component names the tree it belongs to; empty takes the name of the file's
// parent dir, as export lays files out (<sku>/<component>/<sha256>.tar.zst). The manifest must agree.
// The bundle is recorded as imported, so capture never packs it again as this node's own.
func (m *Manager) Import(ctx context.Context, file, component string) (*Imported, error) {
	if component == "" {
		component = filepath.Base(filepath.Dir(file))
	}
	if !validComponent(component) {
		return nil, fmt.Errorf("import %s: cannot tell the component from the file's dir: pass --component, one of %v", file, Components)
	}
	// Stat first: opening a FIFO would block until someone writes it.
	if st, err := os.Stat(file); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("import %s: not a regular file", file)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	rec, err := m.importFrom(ctx, f, component)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", file, err)
	}
	return rec, nil
}

// ImportFrom imports a bundle streamed to it (the daemon's API: `warmd cache import` while the daemon
// runs). The stream is spooled into the records dir first, bounded by the compressed-size limit and
// the free-space reserve, then imported like a file; the spool is removed either way.
func (m *Manager) ImportFrom(ctx context.Context, r io.Reader, component string) (*Imported, error) {
	if !validComponent(component) {
		return nil, fmt.Errorf("import: component is not one of %v", Components)
	}
	tmp, err := m.r.recs.CreateTemp(fsroot.Path{}, "import")
	if err != nil {
		return nil, fmt.Errorf("import: spool: %w", err)
	}
	defer tmp.Abort()
	if err := m.spool(ctx, tmp.File, r); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("import: spool: %w", err)
	}
	rec, err := m.importFrom(ctx, tmp.File, component)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	return rec, nil
}

// spool copies r into f, at most MaxBundleBytes, checking free space as it goes.
func (m *Manager) spool(ctx context.Context, f *os.File, r io.Reader) error {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		k, rerr := r.Read(buf)
		if k > 0 {
			if n += int64(k); n > m.o.MaxBundleBytes {
				return fmt.Errorf("%w: the bundle stream is larger than %d bytes", bundle.ErrTooLarge, m.o.MaxBundleBytes)
			}
			if _, err := f.Write(buf[:k]); err != nil {
				return fmt.Errorf("spool: %w", err)
			}
			if n%(64<<20) < int64(k) {
				if err := m.checkSpace(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return m.checkSpace()
		}
		if rerr != nil {
			return fmt.Errorf("read the bundle stream: %w", rerr)
		}
	}
}

// checkSpace refuses when the data dir's file system is below the reserve.
func (m *Manager) checkSpace() error {
	free, total, err := m.r.recs.Statfs()
	if err != nil {
		return err
	}
	reserve := m.o.Reserve
	if reserve <= 0 {
		reserve = bundle.DefaultReserve(total)
	}
	if free < reserve {
		return fmt.Errorf("%w: %d bytes free, %d must stay free", bundle.ErrNoSpace, free, reserve)
	}
	return nil
}

// importFrom reads the whole bundle once without writing (bundle.Scan): its manifest then bounds
// every entry of the extraction, exactly as the published manifest does on a restore, and the
// free-space check sees the bundle's size before anything is written. The second read must have the
// same sha256 as the first.
func (m *Manager) importFrom(ctx context.Context, f io.ReadSeeker, component string) (*Imported, error) {
	m.op.Lock()
	defer m.op.Unlock()
	opts := m.extractOptions(component)
	scanned, err := bundle.Scan(ctxReader{ctx, f}, opts)
	if err == nil {
		if _, err = f.Seek(0, io.SeekStart); err == nil {
			opts.SHA256, opts.Expect = scanned.SHA256, &scanned.Manifest
			var x *bundle.Extracted
			if x, err = m.extract(ctxReader{ctx, f}, component, opts); err == nil {
				rec, err := m.addExtracted(x.SHA256, x.Size, x, OriginImported)
				if err != nil {
					return nil, err
				}
				return &Imported{Record: *rec, Written: x.Written, Existing: x.Existing, Conflicts: x.Conflicts}, nil
			}
		}
	}
	if errors.Is(err, bundle.ErrRejected) {
		m.refuse(fmt.Sprintf("import: %v", err))
	}
	return nil, err
}

// ctxReader stops a read loop once ctx ends (a signal, a client that went away).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
