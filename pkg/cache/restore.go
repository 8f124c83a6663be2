package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sync/errgroup"

	"warmd.io/warmd/pkg/cache/bundle"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/peer"
)

// Upload sends every captured bundle not yet in the bucket, then adds them to the index in one
// generation. Bundle and manifest objects are written with If-None-Match: a bundle another node
// already uploaded has the same name and the same bytes, so ErrExists is success.
func (m *Manager) Upload(ctx context.Context) (int, error) {
	if m.share == nil {
		return 0, nil
	}
	m.mu.Lock()
	var todo []*Record
	for _, r := range m.records {
		if r.Origin == OriginCaptured && !r.Uploaded && r.Live() {
			todo = append(todo, r)
		}
	}
	m.mu.Unlock()
	if len(todo) == 0 {
		return 0, nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(m.o.Concurrency)
	var mu sync.Mutex
	var done []*Record
	for _, r := range todo {
		g.Go(func() error {
			comp := r.Manifest.Component
			err := m.putPending(gctx, comp, r.SHA256)
			if err != nil && !errors.Is(err, objstore.ErrExists) {
				if errors.Is(err, os.ErrNotExist) {
					m.log.Warn("captured bundle file is gone; it will be captured again", "bundle", r.SHA256[:12])
					return nil
				}
				return fmt.Errorf("upload bundle %s: %w", r.SHA256[:12], err)
			}
			mj, _ := json.Marshal(r.Manifest)
			err = objstore.PutBytes(gctx, m.share.Store, m.share.Bucket, m.share.ManifestKey(comp, r.SHA256), mj, objstore.PutOptions{IfNoneMatch: true})
			if err != nil && !errors.Is(err, objstore.ErrExists) {
				return fmt.Errorf("upload manifest %s: %w", r.SHA256[:12], err)
			}
			mu.Lock()
			done = append(done, r)
			mu.Unlock()
			return nil
		})
	}
	err := g.Wait()
	if len(done) == 0 {
		return 0, err
	}
	entries := make([]IndexEntry, len(done))
	for i, r := range done {
		entries[i] = indexEntry(r)
	}
	if _, perr := m.share.Publish(ctx, entries); perr != nil {
		return 0, errors.Join(err, perr)
	}
	now := m.now()
	m.mu.Lock()
	for _, r := range done {
		r.Uploaded = true
		m.keepCaptured(r.SHA256)
	}
	m.stats.Uploaded += len(done)
	m.stats.LastUpload = &now
	m.mu.Unlock()
	for _, r := range done {
		if serr := m.saveRecord(r); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	m.log.Info("uploaded compile-cache bundles", "bundles", len(done))
	return len(done), err
}

// putPending uploads a captured bundle waiting in the records dir.
func (m *Manager) putPending(ctx context.Context, comp, sha string) error {
	f, err := m.r.recs.Open(pendingPath(sha))
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return m.share.Store.Put(ctx, m.share.Bucket, m.share.BundleKey(comp, sha), f, fi.Size(), objstore.PutOptions{IfNoneMatch: true})
}

func indexEntry(r *Record) IndexEntry {
	files := 0
	for _, e := range r.Manifest.Entries {
		if e.Type == bundle.TypeFile {
			files++
		}
	}
	return IndexEntry{SHA256: r.SHA256, Component: r.Manifest.Component, Size: r.Size, Bytes: r.Manifest.Bytes,
		Files: files, Node: r.Manifest.Node, Created: r.Manifest.Created, Versions: r.Manifest.Versions}
}

// RestoreResult says what one restore did.
type RestoreResult struct {
	Restored []Record
	// Refused lists bundles not restored and why (another SKU's, corrupt, download failed).
	Refused []string
	Remote  int
}

// Restore reads the SKU's index, downloads the bundles this node lacks in parallel, verifies each
// against its name (sha256) and manifest, refuses any built for another SKU, and extracts them
// safely into the tree. Bundles evicted here within EvictHold are left alone.
func (m *Manager) Restore(ctx context.Context) (RestoreResult, error) {
	var res RestoreResult
	if m.share == nil {
		return res, nil
	}
	m.op.Lock()
	defer m.op.Unlock()
	idx, err := m.share.ReadIndex(ctx)
	if err != nil {
		if errors.Is(err, ErrOtherSKU) {
			m.refuse(err.Error())
		}
		m.setError(err)
		return res, err
	}
	res.Remote = len(idx.Bundles)
	now := m.now()
	var todo []IndexEntry
	m.mu.Lock()
	m.stats.RemoteBundles = len(idx.Bundles)
	for _, e := range idx.Bundles {
		r, ok := m.records[e.SHA256]
		if ok && (r.Live() || now.Sub(*r.Evicted) < m.o.EvictHold) {
			continue
		}
		todo = append(todo, e)
	}
	m.mu.Unlock()
	var ps *peerSet
	if len(todo) > 0 {
		ps = m.findPeers(ctx)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(m.o.Concurrency)
	var mu sync.Mutex
	for _, e := range todo {
		g.Go(func() error {
			rec, err := m.fetch(gctx, ps, e)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if gctx.Err() != nil {
					return gctx.Err()
				}
				what := fmt.Sprintf("%s/%s: %v", e.Component, e.SHA256[:12], err)
				m.log.Warn("compile-cache bundle not restored", "bundle", e.SHA256[:12], "component", e.Component, "err", err)
				m.refuse(what)
				res.Refused = append(res.Refused, what)
				return nil
			}
			res.Restored = append(res.Restored, *rec)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	if _, err := m.pruneKept(idx); err != nil {
		m.log.Warn("could not prune kept bundles", "err", err)
	}
	m.mu.Lock()
	m.stats.LastRestore = &now
	m.stats.Restored += len(res.Restored)
	m.mu.Unlock()
	m.setError(nil)
	return res, nil
}

// errExtractionStopped is what the download sees when the extractor stopped reading (it refused the
// bundle, or finished): it ends the GET at once, without retries.
var errExtractionStopped = errors.New("extraction stopped")

// fetch restores one bundle: from a warm peer when one delivers it verified (fromPeers), else
// streamed from the bucket straight into the extractor. The manifest published next to it is read
// from the bucket first: it bounds every entry by its declared size and digest before a byte is
// written, and lets the free-space check see the whole bundle before the download starts.
func (m *Manager) fetch(ctx context.Context, ps *peerSet, e IndexEntry) (*Record, error) {
	expect, err := m.share.ReadManifest(ctx, e.Component, e.SHA256)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return nil, err
	}
	opts := m.extractOptions(e.Component)
	opts.SHA256, opts.Expect = e.SHA256, expect
	if expect == nil {
		// No published manifest (a writer that died between the two uploads): the index's size is
		// the best declared bound; the bundle's own manifest is still checked to the byte.
		opts.MaxBytes = min(opts.MaxBytes, max(e.Bytes, 1))
	}
	if m.fromPeers(ctx, ps, e) {
		f, err := m.openKeptBundle(e.SHA256)
		if err != nil {
			return nil, fmt.Errorf("open kept bundle: %w", err)
		}
		x, err := m.extract(f, e.Component, opts) // checks the sha256 again as it reads
		f.Close()
		if err != nil {
			m.removeKept(e.SHA256)
			return nil, err
		}
		return m.addExtracted(e.SHA256, e.Size, x, OriginRestored)
	}
	k := m.newKeeper()
	pr, pw := io.Pipe()
	getErr := make(chan error, 1)
	go func() {
		_, err := m.share.Store.Get(ctx, m.share.Bucket, m.share.BundleKey(e.Component, e.SHA256), io.MultiWriter(pw, k))
		pw.CloseWithError(err)
		getErr <- err
	}()
	x, err := m.extract(pr, e.Component, opts)
	pr.CloseWithError(objstore.WriterError(errExtractionStopped))
	gerr := <-getErr
	m.counted(peer.FromOrigin, k.n)
	if gerr != nil && err != nil && !errors.Is(gerr, errExtractionStopped) {
		k.abort()
		return nil, fmt.Errorf("download: %w", gerr) // the extraction failed because the download did
	}
	if err != nil {
		k.abort()
		return nil, err
	}
	if kerr := k.commit(e); kerr != nil {
		m.log.Warn("restored bundle not kept for peers", "bundle", e.SHA256[:12], "err", kerr)
	}
	return m.addExtracted(e.SHA256, e.Size, x, OriginRestored)
}

// extract extracts one bundle into comp's tree through fsroot (the tree is opened by handle, and a
// component dir a pod replaced by a link is made a dir again first, never written through).
func (m *Manager) extract(r io.Reader, comp string, opts bundle.Options) (*bundle.Extracted, error) {
	dest, err := m.comp(comp, true)
	if err != nil {
		return nil, err
	}
	defer dest.Close()
	return bundle.Extract(r, dest, opts)
}

// extractOptions are the limits and checks every extraction into comp's tree runs with.
func (m *Manager) extractOptions(comp string) bundle.Options {
	return bundle.Options{MaxBytes: m.o.MaxBundleBytes, Check: m.checkManifest(comp), Sync: m.o.Sync, Reserve: m.o.Reserve}
}

func (m *Manager) addExtracted(sha string, size int64, x *bundle.Extracted, origin string) (*Record, error) {
	now := m.now()
	rec := &Record{SHA256: sha, Size: size, Manifest: x.Manifest, Origin: origin, Added: now, LastUsed: now, Uploaded: origin == OriginRestored}
	if err := m.saveRecord(rec); err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.records[sha] = rec
	m.indexRecord(rec)
	m.stats.Conflicts += len(x.Conflicts)
	m.mu.Unlock()
	if len(x.Conflicts) > 0 {
		m.log.Warn("bundle entries left out: a different file or link stands at their path, or a dir of it is a link or a file in the tree; kept what is there",
			"bundle", sha[:12], "origin", origin, "leftOut", len(x.Conflicts), "first", quoteFirst(x.Conflicts, 10))
	}
	return rec, nil
}

// quoteFirst renders the first n names, each quoted and cut at 128 bytes (fsroot.Quote), for a log
// line: a bundle may leave out thousands of entries with 4,096-byte names.
func quoteFirst(names []string, n int) []string {
	out := make([]string, 0, min(n, len(names)))
	for _, s := range names[:min(n, len(names))] {
		out = append(out, fsroot.Quote(s))
	}
	return out
}
