package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"golang.org/x/sync/errgroup"

	"warmd.io/warmd/pkg/cache/bundle"
)

// captureWorkers bounds bundles packed at once.
const captureWorkers = 4

// candidate is a complete file not yet in any live bundle.
type candidate struct {
	rel  string
	size int64
}

// CaptureResult says what one capture did.
type CaptureResult struct {
	Bundles []Record
	// Pending counts files skipped because they are not complete yet (open for writing, changing).
	Pending int
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
		cands, pending, err := m.scan(comp, writers, false)
		if err != nil {
			return res, err
		}
		res.Pending += pending
		for _, chunk := range m.chunks(cands) {
			g.Go(func() error {
				if err := gctx.Err(); err != nil {
					return err
				}
				rec, err := m.captureChunk(comp, chunk)
				mu.Lock()
				defer mu.Unlock()
				if errors.Is(err, fs.ErrInvalid) || errors.Is(err, fs.ErrNotExist) {
					// A file changed or vanished while it was read: not complete after all; next round.
					m.log.Info("skipping files that changed during capture", "component", comp, "err", err)
					res.Pending += len(chunk)
					return nil
				}
				if err != nil {
					return err
				}
				res.Bundles = append(res.Bundles, *rec)
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
	m.stats.LastCapture = &now
	m.stats.Captured += len(res.Bundles)
	m.mu.Unlock()
	return res, nil
}

// scan walks one component tree and returns the complete files no live record holds (all complete
// files when all is set), and how many files it skipped as not complete yet.
func (m *Manager) scan(comp string, writers map[FileID]bool, all bool) ([]candidate, int, error) {
	dir := m.layout.Dir(comp)
	var out []candidate
	pending := 0
	m.mu.Lock()
	known := m.known
	m.mu.Unlock()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if p == dir {
			return nil
		}
		rel := filepath.ToSlash(p[len(dir)+1:])
		if ignored(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil // dirs are walked; links and devices are never captured
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
		if id, ok := fileID(fi); ok && writers[id] {
			pending++
			return nil
		}
		out = append(out, candidate{rel: rel, size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("scan %s: %w", dir, err)
	}
	return out, pending, nil
}

// chunks cuts sorted candidates into bundles of at most BundleBytes and BundleFiles, keeping
// neighbours (one Triton kernel dir, one FlashInfer op) together.
func (m *Manager) chunks(c []candidate) [][]candidate {
	sort.Slice(c, func(i, j int) bool { return c[i].rel < c[j].rel })
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

// writeBundle packs files of comp into a new bundle file under dir and returns its result and path.
func (m *Manager) writeBundle(dir, comp string, files []candidate) (bundle.Result, string, error) {
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.rel
	}
	tmp, err := os.CreateTemp(dir, "capture"+bundle.TempMarker+"*")
	if err != nil {
		return bundle.Result{}, "", fmt.Errorf("create bundle file: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	res, err := bundle.Write(tmp, m.layout.Dir(comp), names, bundle.Manifest{
		SKU: m.o.SKU, Component: comp, Node: m.o.Node, Created: m.now(), Versions: versionsOf(comp, names),
	})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return bundle.Result{}, "", err
	}
	final := filepath.Join(dir, res.SHA256+bundle.Ext)
	if err := os.Rename(tmp.Name(), final); err != nil {
		return bundle.Result{}, "", fmt.Errorf("store bundle: %w", err)
	}
	return res, final, nil
}

func (m *Manager) captureChunk(comp string, files []candidate) (*Record, error) {
	res, path, err := m.writeBundle(m.layout.Records(), comp, files)
	if err != nil {
		return nil, err
	}
	now := m.now()
	rec := &Record{SHA256: res.SHA256, Size: res.Size, Manifest: res.Manifest, Origin: OriginCaptured, Added: now, LastUsed: now}
	if m.share == nil {
		_ = os.Remove(path) // node-local: the tree itself is the copy
	}
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
// (<dir>/<sku>/<component>/<sha256>.tar.zst), for clusters that cannot reach a shared bucket.
func (m *Manager) Export(dir string) ([]string, error) {
	m.op.Lock()
	defer m.op.Unlock()
	writers, _ := m.o.OpenWriters()
	var out []string
	for _, comp := range Components {
		cands, _, err := m.scan(comp, writers, true)
		if err != nil {
			return out, err
		}
		if len(cands) == 0 {
			continue
		}
		cdir := filepath.Join(dir, m.o.SKU, comp)
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			return out, fmt.Errorf("create export dir: %w", err)
		}
		for _, chunk := range m.chunks(cands) {
			_, path, err := m.writeBundle(cdir, comp, chunk)
			if err != nil {
				return out, fmt.Errorf("export %s: %w", comp, err)
			}
			out = append(out, path)
		}
	}
	return out, nil
}

func sortStrings(s []string) { slices.Sort(s) }
