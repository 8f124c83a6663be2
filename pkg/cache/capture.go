package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"golang.org/x/sync/errgroup"

	"warmd.io/warmd/pkg/cache/bundle"
	"warmd.io/warmd/pkg/fsroot"
)

// captureWorkers bounds bundles packed at once.
const captureWorkers = 4

// candidate is a complete file not yet in any live bundle.
type candidate struct {
	rel  fsroot.Path
	size int64
}

// CaptureResult says what one capture did.
type CaptureResult struct {
	Bundles []Record
	// Pending counts files skipped because they are not complete yet (open for writing, changing).
	Pending int
	// Skipped counts what a capture never bundles from a pod-written tree: symlinks (never followed,
	// never shared), FIFOs, sockets and devices, and names that are not valid paths.
	Skipped int
}

// Capture bundles every complete file of the SKU's tree that no live record holds yet. Bundles
// wait beside the records until Upload sends them (or are dropped at once when there is no remote).
// Callers run it after a quiet period; it is also safe at any time, because it skips files still
// open for writing and files that change while they are read.
func (m *Manager) Capture(ctx context.Context) (CaptureResult, error) {
	m.op.Lock()
	defer m.op.Unlock()
	var res CaptureResult
	writers, err := m.o.OpenWriters()
	if err != nil {
		m.log.Warn("cannot list files open for writing; relying on the quiet period and size checks", "err", err)
		writers = nil
	}
	// Bundles are packed in parallel: reading, hashing and compressing one chunk is CPU work that
	// another chunk's file I/O overlaps.
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(captureWorkers)
	for _, comp := range Components {
		sc, err := m.scan(comp, writers, false)
		if err != nil {
			_ = g.Wait() // chunks of earlier components finish before res is handed back
			return res, err
		}
		mu.Lock() // workers of the previous component may be adding to res
		res.Pending += sc.pending
		res.Skipped += sc.skipped
		mu.Unlock()
		for _, chunk := range m.chunks(sc.cands) {
			g.Go(func() error {
				if err := gctx.Err(); err != nil {
					return err
				}
				rec, left, err := m.captureChunkSkipping(gctx, comp, chunk)
				mu.Lock()
				defer mu.Unlock()
				res.Pending += left.pending
				res.Skipped += left.skipped
				if errors.Is(err, fs.ErrInvalid) || errors.Is(err, fs.ErrNotExist) {
					// Files kept changing while they were read: not complete after all; next round.
					m.log.Info("skipping files that changed during capture", "component", comp, "err", err)
					res.Pending += len(chunk) - left.pending - left.skipped
					return nil
				}
				if err != nil {
					return err
				}
				if rec != nil { // nil: every file of the chunk was left out
					res.Bundles = append(res.Bundles, *rec)
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	now := m.now()
	m.mu.Lock()
	m.stats.Pending = res.Pending
	m.stats.Skipped = res.Skipped
	m.stats.LastCapture = &now
	m.stats.Captured += len(res.Bundles)
	m.mu.Unlock()
	return res, nil
}

// scanned is what one walk of a component tree found.
type scanned struct {
	cands            []candidate
	pending, skipped int
}

// scan walks one component tree and returns the complete files no live record holds (all complete
// files when all is set), how many it skipped as not complete yet, and how many entries it never
// captures (links, special files, invalid names; the first few are logged). The walk goes by handle
// and never follows a link (fsroot), so a pod renaming dirs or planting links meanwhile cannot send it
// outside the tree; what it returns is opened the same way by bundle.Write.
func (m *Manager) scan(comp string, writers map[FileID]bool, all bool) (scanned, error) {
	var sc scanned
	root, err := m.comp(comp, false)
	if errors.Is(err, fs.ErrNotExist) {
		return sc, nil
	}
	if err != nil {
		return sc, err
	}
	defer root.Close()
	m.mu.Lock()
	known := m.known
	m.mu.Unlock()
	skip := func(what string, p fsroot.Path) {
		if sc.skipped++; sc.skipped <= 3 {
			m.log.Info("not capturing "+what+" in a pod-written compile-cache tree", "component", comp, "path", fsroot.Quote(p.String()))
		}
	}
	err = root.WalkDir(fsroot.Path{}, func(p fsroot.Path, d fs.DirEntry, err error) error {
		if err != nil {
			switch {
			case errors.Is(err, fsroot.ErrUnsafePath):
				skip("an entry whose name is not a valid path (not UTF-8, control characters, too long), below", p)
				return nil
			case errors.Is(err, fsroot.ErrTooDeep):
				skip(fmt.Sprintf("the contents of a dir more than %d levels deep", fsroot.MaxWalkDepth), p)
				return nil
			}
			return err
		}
		rel := p.String()
		if ignored(rel) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		switch t := d.Type(); {
		case t.IsDir():
			return nil
		case t&fs.ModeSymlink != 0:
			skip("a symlink", p) // a link is never followed, and never shared
			return nil
		case !t.IsRegular():
			skip("a special file", p)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // vanished
		}
		m.mu.Lock()
		size, have := known[comp+"/"+rel]
		m.mu.Unlock()
		if have && size == fi.Size() && !all {
			return nil
		}
		if fi.Size() > m.o.MaxFileBytes {
			skip(fmt.Sprintf("a file over %d bytes", m.o.MaxFileBytes), p)
			return nil
		}
		if id, ok := fileID(fi); ok && writers[id] {
			sc.pending++
			return nil
		}
		sc.cands = append(sc.cands, candidate{rel: p, size: fi.Size()})
		return nil
	})
	if err != nil {
		return scanned{}, fmt.Errorf("scan %s: %w", root.Dir(), err)
	}
	return sc, nil
}

// chunks cuts sorted candidates into bundles of at most BundleBytes and BundleFiles, keeping
// neighbours (one Triton kernel dir, one FlashInfer op) together.
func (m *Manager) chunks(c []candidate) [][]candidate {
	sort.Slice(c, func(i, j int) bool { return c[i].rel.String() < c[j].rel.String() })
	var out [][]candidate
	var cur []candidate
	var bytes int64
	for _, f := range c {
		if len(cur) > 0 && (bytes+f.size > m.o.BundleBytes || len(cur) >= m.o.BundleFiles) {
			out = append(out, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, f)
		bytes += f.size
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// writeBundle packs files of comp into a new bundle file committed into dir (under its content
// address) and returns its result and path. keep false writes it only to learn its result.
// writeBundle packs files into a bundle under dir; its writes fail once ctx ends, so a signal stops
// a large export within moments and the temp file is removed.
func (m *Manager) writeBundle(ctx context.Context, dir *fsroot.Root, comp string, files []candidate, keep bool) (bundle.Result, fsroot.Path, error) {
	names := make([]fsroot.Path, len(files))
	rels := make([]string, len(files))
	for i, f := range files {
		names[i], rels[i] = f.rel, f.rel.String()
	}
	src, err := m.comp(comp, false)
	if err != nil {
		return bundle.Result{}, fsroot.Path{}, err
	}
	defer src.Close()
	tmp, err := dir.CreateTemp(fsroot.Path{}, "capture")
	if err != nil {
		return bundle.Result{}, fsroot.Path{}, fmt.Errorf("create bundle file: %w", err)
	}
	defer tmp.Abort() // after a Commit it does nothing
	res, err := bundle.WriteLimited(ctxWriter{ctx, tmp}, src, names, bundle.Manifest{
		SKU: m.o.SKU, Component: comp, Node: m.o.Node, Created: m.now(), Versions: versionsOf(comp, rels),
	}, bundle.Limits{MaxFileBytes: m.o.MaxFileBytes})
	if err != nil {
		return bundle.Result{}, fsroot.Path{}, err
	}
	if !keep {
		return res, fsroot.Path{}, nil
	}
	final := pendingPath(res.SHA256)
	if err := tmp.Chmod(0o644); err != nil {
		return bundle.Result{}, fsroot.Path{}, fmt.Errorf("store bundle: %w", err)
	}
	if err := tmp.Commit(final); err != nil {
		return bundle.Result{}, fsroot.Path{}, fmt.Errorf("store bundle: %w", err)
	}
	return res, final, nil
}

func (m *Manager) captureChunk(ctx context.Context, comp string, files []candidate) (*Record, error) {
	// Node-local: the tree itself is the copy, the bundle is only written to learn its manifest.
	res, _, err := m.writeBundle(ctx, m.r.recs, comp, files, m.share != nil)
	if err != nil {
		return nil, err
	}
	now := m.now()
	rec := &Record{SHA256: res.SHA256, Size: res.Size, Manifest: res.Manifest, Origin: OriginCaptured, Added: now, LastUsed: now}
	if err := m.saveRecord(rec); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if old, ok := m.records[rec.SHA256]; ok && old.Live() {
		rec = old
	} else {
		m.records[rec.SHA256] = rec
		m.indexRecord(rec)
	}
	m.mu.Unlock()
	m.log.Info("captured compile-cache bundle", "component", comp, "bundle", rec.SHA256[:12], "files", len(files), "bytes", res.Manifest.Bytes)
	return rec, nil
}

// Export writes every complete file of the SKU's tree into bundle files under dir
// (<dir>/<sku>/<component>/<sha256>.tar.zst), for clusters that cannot reach a shared bucket. It
// stops when ctx ends; every bundle file it listed is complete (each is committed whole).
func (m *Manager) Export(ctx context.Context, dir string) ([]string, error) {
	m.op.Lock()
	defer m.op.Unlock()
	if !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("export dir: %w", err)
		}
		dir = abs
	}
	writers, _ := m.o.OpenWriters()
	var out []string
	for _, comp := range Components {
		sc, err := m.scan(comp, writers, true)
		if err != nil {
			return out, err
		}
		if len(sc.cands) == 0 {
			continue
		}
		cdir, err := openSub(dir, m.o.SKU+"/"+comp)
		if err != nil {
			return out, fmt.Errorf("create export dir: %w", err)
		}
		for _, chunk := range m.chunks(sc.cands) {
			_, p, err := m.writeBundle(ctx, cdir, comp, chunk, true)
			if err != nil {
				cdir.Close()
				return out, fmt.Errorf("export %s: %w", comp, err)
			}
			out = append(out, cdir.Name(p))
		}
		cdir.Close()
	}
	return out, nil
}

// openSub opens (creating) dir/sub as a Root.
func openSub(dir, sub string) (*fsroot.Root, error) {
	top, err := fsroot.Open(dir)
	if err != nil {
		return nil, err
	}
	defer top.Close()
	return top.Sub(fsroot.MustPath(sub))
}

func sortStrings(s []string) { slices.Sort(s) }

// ctxWriter fails writes once ctx has ended.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// leftOut counts the files one chunk's capture left out: pending (changed or vanished while read,
// captured next round once stable) and skipped (too large or sparse: never captured).
type leftOut struct{ pending, skipped int }

// maxChunkRetries bounds how often one chunk is packed again without a file that failed it, so a
// pod rewriting many files at once costs a bounded number of re-reads of at most BundleBytes each.
const maxChunkRetries = 8

// captureChunkSkipping captures chunk, leaving out each file bundle.WriteLimited refuses (a
// *bundle.SkipError names it) and packing the rest again: one changing, growing, sparse or too-large
// file costs only itself, never the other files of its chunk.
func (m *Manager) captureChunkSkipping(ctx context.Context, comp string, chunk []candidate) (*Record, leftOut, error) {
	var left leftOut
	for try := 0; ; try++ {
		rec, err := m.captureChunk(ctx, comp, chunk)
		var se *bundle.SkipError
		if !errors.As(err, &se) || try == maxChunkRetries {
			return rec, left, err
		}
		if se.Transient() {
			left.pending++
		} else {
			left.skipped++
			m.log.Info("not capturing a file of a pod-written compile-cache tree", "component", comp, "reason", se.Kind, "err", se)
		}
		chunk = slices.DeleteFunc(slices.Clone(chunk), func(c candidate) bool { return c.rel == se.Path })
		if len(chunk) == 0 {
			return nil, left, nil
		}
	}
}
