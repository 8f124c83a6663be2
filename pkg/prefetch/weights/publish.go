package weights

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/hfcache"
	"warmd.io/warmd/pkg/prefetch"
)

// maxRecord bounds a record read back (a model of a million files stays far below it).
const maxRecord = 64 << 20

// record is what warmd remembers about a published model (<dataDir>/state/weights/<dir>.json):
// how each file was verified, and when the model was last used (for LRU eviction).
type record struct {
	Model     string                      `json:"model"`
	Revision  string                      `json:"revision"`
	Source    string                      `json:"source"`
	Bytes     int64                       `json:"bytes"`
	Published time.Time                   `json:"published"`
	LastUsed  time.Time                   `json:"lastUsed"`
	Files     []prefetch.FileVerification `json:"files"`
	// Blobs maps each file to its blob name under blobs/.
	Blobs map[string]string `json:"blobs"`
}

func (e *Engine) readRecord(model string) (*record, error) {
	mp, err := pathsFor(model, "main")
	if err != nil {
		return nil, err
	}
	data, err := e.state.ReadFile(mp.record, maxRecord)
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("weights record %s is not a record (it is refetched): %w", e.state.Name(mp.record), err)
	}
	return &r, nil
}

func (e *Engine) writeRecord(r *record) error {
	mp, err := pathsFor(r.Model, "main")
	if err != nil {
		return err
	}
	data, _ := json.MarshalIndent(r, "", "  ")
	return e.state.WriteFile(mp.record, data, 0o644)
}

// blobName names a file's blob: its sha256 when known (as Hugging Face does), else a stable id of
// what was fetched and verified (source, name, size, ETag, checksum), prefixed "warmd-". Either way
// it is warmd's own text (hex), one path component.
func blobName(src string, sf stagedFile, fv prefetch.FileVerification) string {
	if hexDigest.MatchString(strings.TrimPrefix(fv.Digest, "sha256:")) && strings.HasPrefix(fv.Digest, "sha256:") {
		return strings.TrimPrefix(fv.Digest, "sha256:")
	}
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d\x00%s\x00%s", src, sf.obj.Key, sf.obj.Size, sf.obj.ETag, fv.Digest)))
	return "warmd-" + hex.EncodeToString(h[:20])
}

// blobTarget is the text of the snapshot link for file name: relative, from
// snapshots/<rev>/<name>'s directory up to the model dir, then blobs/<blob>.
func blobTarget(name fsroot.Path, blob string) string {
	return strings.Repeat("../", name.Depth()+1) + "blobs/" + blob
}

// checkLinks refuses, before anything is downloaded, a listing whose snapshot links could not be
// made or opened: each link's target must resolve (lexically) inside the model dir, fit a symlink,
// and the link's absolute path must fit PATH_MAX for vLLM to open it.
func (e *Engine) checkLinks(mp modelPaths, files []stagedFile) error {
	blob := strings.Repeat("0", 64)
	for _, sf := range files {
		link := mp.snapshot().Join(sf.name)
		target := blobTarget(sf.name, blob)
		if err := fsroot.SymlinkTarget(link, target); err != nil {
			return fmt.Errorf("%s cannot be published: %w; rename it to a shallower path", fsroot.Quote(sf.obj.Key), err)
		}
		if n := len(e.cache.Name(link)); n >= fsroot.MaxPathLen {
			return fmt.Errorf("%s cannot be published: its snapshot path would be %d bytes, over the %d a program can open; rename it to a shorter path",
				fsroot.Quote(sf.obj.Key), n, fsroot.MaxPathLen-1)
		}
	}
	return nil
}

// publish moves verified files into blobs/, builds snapshots/<rev> of relative symlinks in staging,
// and swaps it into place with one rename (RENAME_EXCHANGE when a snapshot of that revision already
// exists), then points refs/<rev> at it. Readers see the old snapshot or the new one, never a mix.
// Every step goes through the cache Root: nothing is reached through a link.
func (f *fetch) publish() error {
	e := f.e
	root := e.cache
	t0 := time.Now()
	defer func() { e.opts.Log.Debug("publish", "model", f.m.Name, "took", time.Since(t0).String()) }()
	for _, sf := range f.files {
		if err := sf.fh.Sync(); err != nil {
			return diskErr(fmt.Errorf("sync %s: %w", sf.fh.Name(), err))
		}
	}
	if err := f.j.sync(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	mp := f.mp
	for _, d := range []fsroot.Path{mp.blobs(), mp.snapshots(), mp.dir.Join(fsroot.MustPath(hfcache.RefsDir))} {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return diskErr(err)
		}
	}
	rec := &record{Model: f.m.Name, Revision: f.m.Revision, Source: f.src.String(), Bytes: f.status.BytesTotal,
		Published: e.opts.Now().UTC(), LastUsed: e.opts.Now().UTC(), Files: f.status.Files, Blobs: map[string]string{}}
	snap := mp.staging.Join(fsroot.MustPath("snapshot"))
	if err := root.RemoveAll(snap); err != nil {
		return err
	}
	if err := root.MkdirAll(snap, 0o755); err != nil {
		return diskErr(err)
	}
	for i, sf := range f.files {
		name := blobName(f.src.String(), sf, f.status.Files[i])
		rec.Blobs[sf.obj.Key] = name
		dst, err := mp.blobs().Child(name)
		if err != nil {
			return err
		}
		if err := f.linkBlob(sf, dst); err != nil {
			return diskErr(fmt.Errorf("publish blob of %s: %w", fsroot.Quote(sf.obj.Key), err))
		}
		if err := root.Symlink(blobTarget(sf.name, name), snap.Join(sf.name)); err != nil {
			return diskErr(fmt.Errorf("link %s: %w", fsroot.Quote(sf.obj.Key), err))
		}
	}
	if err := root.SyncDir(mp.blobs()); err != nil {
		return err
	}
	final := mp.snapshot()
	if err := root.RenameNoReplace(snap, final); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("publish snapshot %s: %w", root.Name(final), err)
		}
		if err := root.Exchange(snap, final); err != nil {
			return fmt.Errorf("swap snapshot %s: %w", root.Name(final), err)
		}
		if err := root.RemoveAll(snap); err != nil { // now the old snapshot
			e.opts.Log.Warn("could not remove the replaced snapshot", "model", f.m.Name, "err", err)
		}
	}
	// A ref write an earlier crash cut short left its temp in refs/, where nothing else sweeps it.
	if _, err := root.RemoveTempsOf(mp.ref()); err != nil {
		e.opts.Log.Warn("could not remove a stale temp beside the ref", "model", f.m.Name, "err", err)
	}
	if err := root.WriteFile(mp.ref(), []byte(f.m.Revision), 0o644); err != nil {
		return diskErr(err)
	}
	if err := e.writeRecord(rec); err != nil {
		return diskErr(err)
	}
	e.gcBlobs(mp)
	f.j.close()
	if err := root.RemoveAll(mp.staging); err != nil {
		e.opts.Log.Warn("could not clean staging after publish", "dir", root.Name(mp.staging), "err", err)
	}
	f.mu.Lock()
	f.status.State = prefetch.StateReady
	f.status.Staged, f.status.Pieces, f.status.Servable = nil, nil, nil // served from the snapshot now
	f.status.BytesDone = f.status.BytesTotal
	f.status.SnapshotPath = root.Name(final)
	f.status.Finished = e.opts.Now().UTC()
	f.status.BytesPerSecond, f.status.ETASeconds = 0, 0
	if ms, ok := f.src.(prefetch.MultiSource); ok {
		bs := ms.ByteSources()
		f.status.From = &bs
	}
	f.mu.Unlock()
	f.report(0)
	e.opts.Log.Info("model published", "model", f.m.Name, "revision", f.m.Revision, "snapshot", root.Name(final))
	return nil
}

// linkBlob hard-links the staged file to blobs/<name>. A link, not a rename: staging stays whole
// until the snapshot is in place, so a crash here resumes with nothing to refetch. An existing blob
// is kept only when it is a regular file of the right size (the name is its content's id); anything
// else there is replaced.
func (f *fetch) linkBlob(sf stagedFile, dst fsroot.Path) error {
	root := f.e.cache
	fi, err := root.Lstat(dst)
	switch {
	case err == nil && fi.Mode().IsRegular() && fi.Size() == sf.obj.Size:
		return nil
	case err == nil:
		if err := root.RemoveAll(dst); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return root.Link(sf.data, dst)
}

// gcBlobs removes blobs no snapshot of the model links to (left by a replaced revision). It reads
// the snapshots' links as text and never follows one; only links of the exact form warmd makes
// (../…/blobs/<name>, climbing to the model dir) keep a blob.
func (e *Engine) gcBlobs(mp modelPaths) {
	root := e.cache
	used := map[string]bool{}
	err := root.WalkDir(mp.snapshots(), func(p fsroot.Path, d fs.DirEntry, err error) error {
		if errors.Is(err, fsroot.ErrTooDeep) {
			return err // links below it would go unseen: never delete on a partial view
		}
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		t, err := root.Readlink(p)
		if err != nil {
			return err
		}
		// p is snapshots/<rev>/<name>: the link climbs Depth-2 components back to the model dir.
		inSnap := p.Depth() - mp.snapshots().Depth() - 1
		if blob, ok := strings.CutPrefix(t, strings.Repeat("../", inSnap+1)+"blobs/"); ok && !strings.Contains(blob, "/") {
			used[blob] = true
		}
		return nil
	})
	if err != nil {
		// Never delete on a partial view of what is used.
		e.opts.Log.Warn("blob garbage collection skipped", "model", mp.name, "err", err)
		return
	}
	entries, err := root.ReadDir(mp.blobs())
	if err != nil {
		return
	}
	for _, b := range entries {
		if used[b.Name()] {
			continue
		}
		p, err := mp.blobs().Child(b.Name())
		if err == nil {
			err = root.RemoveAll(p)
		}
		if err != nil {
			e.opts.Log.Warn("could not remove an unused blob", "model", mp.name, "err", err)
		}
	}
}
