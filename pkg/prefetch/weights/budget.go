package weights

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/hfcache"
	"warmd.io/warmd/pkg/prefetch"
)

// Eviction rule (documented for operators): when a model does not fit the budget, published models
// are evicted least recently used first. A model is never evicted while it is in use, which means
// either InUse(model) reports a running pod on this node using it, or it was used within
// InUseWindow. "Used" is recorded in the model's record: when it is published, whenever the
// manager sees InUse report it, and whenever someone calls Touch (e.g. readiness seeing a vLLM
// start). File access times are not used: nodes mount with relatime/noatime. If the model still
// does not fit, it fails with ErrBudget and every other model is left alone.

// Touch records that model was just used, so eviction skips it for InUseWindow.
func (e *Engine) Touch(model string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, err := e.readRecord(model)
	if err != nil {
		return err
	}
	r.LastUsed = e.opts.Now().UTC()
	return e.writeRecord(r)
}

// Installed returns the published models, from their records.
func (e *Engine) Installed() ([]record, error) {
	entries, err := e.state.ReadDir(fsroot.Path{})
	if err != nil {
		return nil, err
	}
	var out []record
	for _, d := range entries {
		if !strings.HasSuffix(d.Name(), ".json") || fsroot.IsTemp(d.Name()) || !d.Type().IsRegular() {
			continue
		}
		p, err := (fsroot.Path{}).Child(d.Name())
		if err != nil {
			continue
		}
		data, err := e.state.ReadFile(p, maxRecord)
		if err != nil {
			continue
		}
		var r record
		if err := jsonUnmarshal(data, &r); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// UsedBytes is the bytes of every published model's blobs.
func (e *Engine) UsedBytes() int64 {
	var n int64
	entries, _ := e.cache.ReadDir(fsroot.Path{})
	for _, d := range entries {
		if !strings.HasPrefix(d.Name(), hfcache.DirPrefix) || !d.IsDir() {
			continue
		}
		if p, err := fsroot.ParsePath(d.Name()); err == nil {
			n += e.dirBytes(hfcache.Blobs(p))
		}
	}
	return n
}

// dirBytes sums the regular files below d (never through a link).
func (e *Engine) dirBytes(d fsroot.Path) int64 {
	var n int64
	e.cache.WalkDir(d, func(_ fsroot.Path, de fs.DirEntry, err error) error {
		if err == nil && de.Type().IsRegular() {
			if fi, err := de.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// inUse applies the eviction rule's "in use" test.
func (e *Engine) inUse(r record, now time.Time) bool {
	return e.opts.InUse(r.Model) || now.Sub(r.LastUsed) < e.opts.InUseWindow
}

// makeRoom evicts LRU unused models until need more bytes fit the budget.
func (e *Engine) makeRoom(m config.Model, need int64) error {
	if e.opts.Budget <= 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if need > e.opts.Budget {
		return fmt.Errorf("%w: model %s needs %d bytes, the budget is %d (raise weights.budget)", ErrBudget, m.Name, need, e.opts.Budget)
	}
	mp, err := pathsFor(m.Name, "main")
	if err != nil {
		return err
	}
	own := e.dirBytes(mp.blobs()) // replaced by this fetch's blobs
	used := e.UsedBytes() - own
	if used+need <= e.opts.Budget {
		return nil
	}
	recs, err := e.Installed()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	slices.SortFunc(recs, func(a, b record) int { return a.LastUsed.Compare(b.LastUsed) })
	now := e.opts.Now()
	var kept []string
	for _, r := range recs {
		if used+need <= e.opts.Budget {
			break
		}
		if r.Model == m.Name {
			continue
		}
		if e.inUse(r, now) {
			kept = append(kept, r.Model)
			continue
		}
		freed, err := e.evictLocked(r.Model)
		if err != nil {
			return err
		}
		used -= freed
		e.opts.Log.Info("evicted model for budget", "model", r.Model, "freed", freed, "for", m.Name)
	}
	if used+need > e.opts.Budget {
		return fmt.Errorf("%w: model %s needs %d bytes, %d of the %d budget are held by models in use (%s); raise weights.budget or stop using one",
			ErrBudget, m.Name, need, used, e.opts.Budget, strings.Join(kept, ", "))
	}
	return nil
}

// Evict removes a published model (its record first, so a crash mid-removal never leaves a record
// claiming a half-removed model). It refuses a model in use.
func (e *Engine) Evict(model string) (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, err := e.readRecord(model); err == nil && e.inUse(*r, e.opts.Now()) {
		return 0, fmt.Errorf("model %s is in use; not evicting", model)
	}
	return e.evictLocked(model)
}

func (e *Engine) evictLocked(model string) (int64, error) {
	mp, err := pathsFor(model, "main")
	if err != nil {
		return 0, err
	}
	freed := e.dirBytes(mp.blobs())
	if err := e.state.Remove(mp.record); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	trash, err := staging.Child(fmt.Sprintf("evict-%s-%d", mp.dir, time.Now().UnixNano()))
	if err != nil {
		return 0, err
	}
	if err := e.cache.Rename(mp.dir, trash); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("evict %s: %w", model, err)
	}
	if err := e.cache.RemoveAll(trash); err != nil {
		return 0, fmt.Errorf("evict %s: %w", model, err)
	}
	return freed, nil
}

// Check re-verifies a published model cheaply, as the daemon does on start: the record exists and
// matches the revision, every snapshot file resolves to a blob of the recorded size, and safetensors
// headers still parse. It returns the model's Ready status, or an error saying what is wrong (the
// caller then fetches the model again).
func (e *Engine) Check(m config.Model) (prefetch.ModelStatus, error) {
	if m.Revision == "" {
		m.Revision = "main"
	}
	r, err := e.readRecord(m.Name)
	if err != nil {
		return prefetch.ModelStatus{}, fmt.Errorf("model %s has no verified snapshot: %w", m.Name, err)
	}
	if r.Revision != m.Revision || r.Source != sourceString(m.Source) {
		return prefetch.ModelStatus{}, fmt.Errorf("model %s on disk is revision %s from %s; the config wants %s from %s", m.Name, r.Revision, r.Source, m.Revision, m.Source)
	}
	mp, err := pathsFor(m.Name, m.Revision)
	if err != nil {
		return prefetch.ModelStatus{}, err
	}
	for _, fv := range r.Files {
		if err := e.checkFile(mp, r, fv); err != nil {
			return prefetch.ModelStatus{}, fmt.Errorf("model %s: %s: %w", m.Name, fsroot.Quote(fv.Name), err)
		}
	}
	snap := e.cache.Name(mp.snapshot())
	return prefetch.ModelStatus{Model: m.Name, Revision: m.Revision, Source: m.Source, State: prefetch.StateReady,
		BytesDone: r.Bytes, BytesTotal: r.Bytes, SnapshotPath: snap, CacheRoot: e.CacheRoot(), Files: r.Files,
		Finished: r.Published}, nil
}

// checkFile checks one recorded file on handles: its snapshot entry is the link warmd made (by its
// text: nothing is followed), the blob it names is a regular file of the verified size, and a
// safetensors header still parses.
func (e *Engine) checkFile(mp modelPaths, r *record, fv prefetch.FileVerification) error {
	name, err := fsroot.ParsePath(fv.Name)
	if err != nil {
		return err
	}
	blobName := r.Blobs[fv.Name]
	blob, err := mp.blobs().Child(blobName)
	if err != nil {
		return fmt.Errorf("the record names no valid blob: %w", err)
	}
	t, err := e.cache.Readlink(mp.snapshot().Join(name))
	if err != nil {
		return err
	}
	if t != blobTarget(name, blobName) {
		return fmt.Errorf("the snapshot entry is not the link warmd made (points elsewhere)")
	}
	fi, err := e.cache.Lstat(blob)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Size() != fv.Size {
		return fmt.Errorf("blob is %d bytes (%s), verified as %d", fi.Size(), fi.Mode().Type(), fv.Size)
	}
	if strings.HasSuffix(fv.Name, ".safetensors") {
		fh, err := e.cache.Open(blob)
		if err != nil {
			return err
		}
		defer fh.Close()
		return checkSafetensors(fh, fi.Size())
	}
	return nil
}

// sourceString normalizes a model source URL the way the sources print themselves.
func sourceString(s string) string {
	if !strings.HasSuffix(s, "/") {
		s += "/"
	}
	if strings.HasPrefix(s, "file://") {
		return "file://" + filepath.Clean(strings.TrimPrefix(s, "file://")) + "/"
	}
	return s
}
