package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"warmd.io/warmd/pkg/cache/bundle"
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

// TreeBytes measures the SKU tree on disk (all files, captured or not).
func (m *Manager) TreeBytes() (map[string]int64, map[string]int, error) {
	bytes, files := map[string]int64{}, map[string]int{}
	for _, comp := range Components {
		err := filepath.WalkDir(m.layout.Dir(comp), func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					bytes[comp] += fi.Size()
					files[comp]++
				}
			}
			return nil
		})
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
		freed := m.removeFiles(r)
		used -= freed
		res.Freed += freed
		res.Evicted = append(res.Evicted, r.SHA256)
		m.mu.Lock()
		r.Evicted = &now
		m.stats.Evicted++
		m.mu.Unlock()
		_ = os.Remove(m.pendingPath(r.SHA256))
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

// removeFiles deletes r's files that no other live record holds, then the dirs left empty.
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
	root := m.layout.Dir(comp)
	var freed int64
	dirs := map[string]bool{}
	for _, e := range r.Manifest.Entries {
		if e.Type != bundle.TypeFile || shared[e.Path] {
			continue
		}
		p := filepath.Join(root, filepath.FromSlash(e.Path))
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != e.Size {
			continue // gone or replaced by something else: not ours to delete
		}
		if os.Remove(p) == nil {
			freed += e.Size
			for d := filepath.Dir(p); strings.HasPrefix(d, root+string(filepath.Separator)); d = filepath.Dir(d) {
				dirs[d] = true
			}
		}
	}
	// Deepest first; Remove fails harmlessly on dirs that still hold something.
	ds := make([]string, 0, len(dirs))
	for d := range dirs {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b string) int { return len(b) - len(a) })
	for _, d := range ds {
		_ = os.Remove(d)
	}
	return freed
}
