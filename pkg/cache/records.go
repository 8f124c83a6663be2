package cache

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"warmd.io/warmd/pkg/cache/bundle"
	"warmd.io/warmd/pkg/fsroot"
)

// Origins of a bundle on this node.
const (
	OriginCaptured = "captured"
	OriginRestored = "restored"
	OriginImported = "imported"
)

// Record is what the node knows about one bundle its tree holds (or held, when Evicted is set).
// Records live as JSON files so a restart knows what is captured without re-reading the tree, and
// use times are tracked here because atime is unreliable (noatime/relatime mounts).
type Record struct {
	SHA256   string          `json:"sha256"`
	Size     int64           `json:"size"`
	Manifest bundle.Manifest `json:"manifest"`
	Origin   string          `json:"origin"`
	Added    time.Time       `json:"added"`
	LastUsed time.Time       `json:"lastUsed"`
	// Uploaded is set once the bundle, its manifest and its index entry are in the bucket.
	Uploaded bool `json:"uploaded,omitempty"`
	// Evicted is when the bundle's files were removed for the budget; restore leaves it alone for
	// Options.EvictHold so eviction and restore do not fight.
	Evicted *time.Time `json:"evicted,omitempty"`
}

// Live reports whether the record's files are (meant to be) in the tree.
func (r *Record) Live() bool { return r.Evicted == nil }

// Key is the record's component-qualified path prefix check: does it hold an entry under prefix
// ("<component>/<path>" or "" for everything)?
func (r *Record) Under(prefix string) bool {
	if prefix == "" {
		return true
	}
	comp, rest, _ := strings.Cut(prefix, "/")
	if comp != r.Manifest.Component {
		return false
	}
	if rest == "" {
		return true
	}
	for _, e := range r.Manifest.Entries {
		if e.Path == rest || strings.HasPrefix(e.Path, rest+"/") {
			return true
		}
	}
	return false
}

func recordPath(sha string) fsroot.Path { return fsroot.MustPath(sha + ".json") }

// pendingPath is where a captured bundle waits for upload (in the records dir).
func pendingPath(sha string) fsroot.Path { return fsroot.MustPath(sha + bundle.Ext) }

// saveRecord writes r with the one atomic writer (temp, fsync, rename, dir fsync).
func (m *Manager) saveRecord(r *Record) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return fmt.Errorf("encode bundle record: %w", err)
	}
	if err := m.r.recs.WriteFile(recordPath(r.SHA256), b, 0o644); err != nil {
		return fmt.Errorf("save bundle record: %w", err)
	}
	return nil
}

// loadRecords reads every record of this SKU; unreadable ones are reported and skipped.
func (m *Manager) loadRecords() error {
	if m.r.recs == nil {
		return nil // read-only, and no records dir yet
	}
	ents, err := m.r.recs.ReadDir(fsroot.Path{})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read bundle records: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range ents {
		name := e.Name()
		p, perr := fsroot.Path{}.Child(name)
		if perr != nil {
			continue // not ours: no record has such a name
		}
		if bundle.IsTemp(name) || fsroot.IsTemp(name) || strings.HasSuffix(name, ".warmd-new") {
			if !m.o.ReadOnly {
				_ = m.r.recs.Remove(p)
			}
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		r, err := readRecord(m.r.recs, p)
		if err != nil {
			m.log.Warn("skipping unreadable bundle record", "file", name, "err", err)
			continue
		}
		if r.SHA256+".json" != name {
			m.log.Warn("skipping bundle record filed under another name", "file", name)
			continue
		}
		m.records[r.SHA256] = r
		m.indexRecord(r)
	}
	return nil
}

// maxRecordBytes bounds a record file read back: a manifest of the largest bundle the reader accepts.
const maxRecordBytes = 64 << 20

// readRecord reads and checks one record. Records are warmd's own, but eviction deletes the files
// they name, so a record edited (or replaced by a link) is checked like outside input: every path
// must be a clean in-tree name. Errors never quote the file's text.
func readRecord(recs *fsroot.Root, p fsroot.Path) (*Record, error) {
	b, err := recs.ReadFile(p, maxRecordBytes)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, bundle.JSONError(err)
	}
	if !validSHA256(r.SHA256) {
		return nil, errors.New("field sha256 is not 64 lowercase hex digits")
	}
	if r.Origin != OriginCaptured && r.Origin != OriginRestored && r.Origin != OriginImported {
		return nil, fmt.Errorf("field origin is not one of %s, %s, %s", OriginCaptured, OriginRestored, OriginImported)
	}
	if !validComponent(r.Manifest.Component) {
		return nil, fmt.Errorf("field manifest.component is not one of %v", Components)
	}
	if err := r.Manifest.Validate(); err != nil {
		return nil, fmt.Errorf("field manifest: %w", err)
	}
	return &r, nil
}

// indexRecord remembers which files a live record holds, so capture skips them. Caller holds mu.
func (m *Manager) indexRecord(r *Record) {
	if !r.Live() {
		return
	}
	for _, e := range r.Manifest.Entries {
		if e.Type == bundle.TypeFile {
			m.known[r.Manifest.Component+"/"+e.Path] = e.Size
		}
	}
}
