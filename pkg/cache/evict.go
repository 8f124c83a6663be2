package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"time"

	"warmd.io/warmd/pkg/cache/bundle"
	"warmd.io/warmd/pkg/fsroot"
)

// MarkUsed records that a pod used the tree under prefix ("<component>/<path>", "" for the whole
// SKU tree) at t. Eviction orders bundles by this, not by atime (noatime and relatime mounts make
// atime useless). pkg/phases reports vLLM starts; the daemon part turns them into MarkUsed calls.
func (m *Manager) MarkUsed(prefix string, t time.Time) {
	m.mu.Lock()
	var changed []*Record
	for _, r := range m.records {
		if r.Live() && r.Under(prefix) && t.After(r.LastUsed) {
			r.LastUsed = t.UTC()
			changed = append(changed, r)
		}
	}
	m.mu.Unlock()
	for _, r := range changed {
		if err := m.saveRecord(r); err != nil {
			m.log.Warn("could not save bundle use time", "bundle", r.SHA256[:12], "err", err)
		}
	}
}

// TreeBytes measures the SKU tree on disk (all files, captured or not). It walks by handle and never
// follows a link, like everything that reads the pod-written tree.
func (m *Manager) TreeBytes() (map[string]int64, map[string]int, error) {
	bytes, files := map[string]int64{}, map[string]int{}
	for _, comp := range Components {
		root, err := m.comp(comp, false)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return bytes, files, err
		}
		err = root.WalkDir(fsroot.Path{}, func(_ fsroot.Path, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // a name that is not a valid path: counted by capture, not here
			}
			if d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					bytes[comp] += fi.Size()
					files[comp]++
				}
			}
			return nil
		})
		root.Close()
		if err != nil {
			return bytes, files, fmt.Errorf("measure %s: %w", m.layout.Dir(comp), err)
		}
	}
	return bytes, files, nil
}

// EvictResult says what one eviction did.
type EvictResult struct {
	Evicted []string
	Freed   int64
	// Over is how far the tree still exceeds the budget (in-use bundles and uncaptured files are
	// never evicted).
	Over int64
}

// Evict removes the files of least-recently-used bundles until the tree fits the budget. Bundles
// under a tree InUse reports, and bundles used within MinIdle, are skipped; a file another live
// bundle also holds stays.
func (m *Manager) Evict() (EvictResult, error) {
	var res EvictResult
	if m.o.Budget <= 0 {
		return res, nil
	}
	m.op.Lock()
	defer m.op.Unlock()
	per, _, err := m.TreeBytes()
	if err != nil {
		return res, err
	}
	var used int64
	for _, b := range per {
		used += b
	}
	_, kept := m.KeptBundles() // kept copies for peers count against the same budget
	used += kept
	if used <= m.o.Budget {
		return res, nil
	}
	var inUse []string
	if m.o.InUse != nil {
		inUse = m.o.InUse()
	}
	m.mu.Lock()
	var live []*Record
	for _, r := range m.records {
		if r.Live() {
			live = append(live, r)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(live, func(a, b *Record) int { return a.LastUsed.Compare(b.LastUsed) })
	now := m.now()
	for _, r := range live {
		if used <= m.o.Budget {
			break
		}
		if slices.ContainsFunc(inUse, r.Under) || now.Sub(r.LastUsed) < m.o.MinIdle {
			continue
		}
		freed := m.removeFiles(r) + m.removeKept(r.SHA256)
		used -= freed
		res.Freed += freed
		res.Evicted = append(res.Evicted, r.SHA256)
		m.mu.Lock()
		r.Evicted = &now
		m.stats.Evicted++
		m.mu.Unlock()
		_ = m.r.recs.Remove(pendingPath(r.SHA256))
		if err := m.saveRecord(r); err != nil {
			return res, err
		}
		m.log.Info("evicted compile-cache bundle", "bundle", r.SHA256[:12], "component", r.Manifest.Component, "freed", freed, "lastUsed", r.LastUsed)
	}
	if used > m.o.Budget {
		res.Over = used - m.o.Budget
	}
	return res, nil
}

// removeFiles deletes r's files that no other live record holds, then the dirs left empty. The tree
// is pod-written: every delete goes through fsroot (each element reached by handle, no link
// followed, the file itself unlinked), so a dir a pod swapped for a link to somewhere else, before or
// during the eviction, makes that delete fail instead of removing a file out there.
func (m *Manager) removeFiles(r *Record) int64 {
	comp := r.Manifest.Component
	m.mu.Lock()
	shared := map[string]bool{}
	for _, o := range m.records {
		if o == r || !o.Live() || o.Manifest.Component != comp {
			continue
		}
		for _, e := range o.Manifest.Entries {
			shared[e.Path] = true
		}
	}
	for _, e := range r.Manifest.Entries {
		if !shared[e.Path] {
			delete(m.known, comp+"/"+e.Path)
		}
	}
	m.mu.Unlock()
	root, err := m.comp(comp, false)
	if err != nil {
		m.log.Warn("cannot evict from the compile-cache tree", "component", comp, "err", err)
		return 0
	}
	defer root.Close()
	var freed int64
	dirs := map[fsroot.Path]bool{}
	for _, e := range r.Manifest.Entries {
		if e.Type != bundle.TypeFile || shared[e.Path] {
			continue
		}
		p, err := fsroot.ParsePath(e.Path)
		if err != nil {
			continue // records are validated when loaded; never act on a name that is not a path
		}
		fi, err := root.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != e.Size {
			continue // gone, or replaced by something else: not ours to delete
		}
		if root.Remove(p) == nil {
			freed += e.Size
			for d := p.Dir(); !d.IsRoot(); d = d.Dir() {
				dirs[d] = true
			}
		}
	}
	// Deepest first; a dir that still holds something stays.
	ds := slices.Collect(maps.Keys(dirs))
	slices.SortFunc(ds, func(a, b fsroot.Path) int { return b.Depth() - a.Depth() })
	for _, d := range ds {
		if fi, err := root.Lstat(d); err == nil && fi.IsDir() {
			_ = root.Remove(d)
		}
	}
	return freed
}
