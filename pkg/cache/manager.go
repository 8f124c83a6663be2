package cache

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	"warmd.io/warmd/pkg/cache/bundle"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
)

// Options configure a Manager. Zero values take the documented defaults.
type Options struct {
	// DataDir is warmd's data dir; the trees live in <DataDir>/compile-cache.
	DataDir string
	// SKU is the node's SKU key (pkg/nvml), already known to be cacheable.
	SKU string
	// Node names this node in the manifests it writes.
	Node string
	// Store, Bucket and Prefix say where bundles are shared; a nil Store keeps caches node-local.
	Store  objstore.Store
	Bucket string
	Prefix string
	// Budget caps the bytes of this SKU's tree; zero means no cap.
	Budget int64
	// EvictHold keeps an evicted bundle from being restored again this long. Default 6h.
	EvictHold time.Duration
	// MinIdle protects bundles used (captured, restored, MarkUsed) this recently from eviction even
	// when InUse does not name them: without a source of running pods' trees, recent use is the best
	// sign a pod still needs them. Default 1h.
	MinIdle time.Duration
	// Concurrency bounds parallel bundle downloads and uploads. Default 8.
	Concurrency int
	// BundleBytes and BundleFiles bound one captured bundle, so restores run in parallel and one bad
	// file costs one small bundle. Defaults 64 MiB and 4096 files.
	BundleBytes int64
	BundleFiles int
	// MaxBundleBytes caps the uncompressed size of a bundle the reader accepts. Default 16 GiB.
	MaxBundleBytes int64
	// MaxFileBytes is the largest file capture packs; a larger one is skipped and reported, never
	// the reason its neighbours are not captured. Default 4 GiB (at most MaxBundleBytes).
	MaxFileBytes int64
	// Reserve is the free space restores and imports leave on the data dir's file system; an
	// extraction that would eat into it stops and keeps nothing. Zero: bundle.DefaultReserve (2 % of
	// the file system, 256 MiB to 32 GiB).
	Reserve int64
	// Sync flushes restored files to disk before renaming them into place. Default on in the daemon.
	Sync bool
	// KeepBundles keeps every verified bundle (captured here and uploaded, or restored) under KeptDir
	// for the peer server, bounded by the SKU's index and counted against Budget. Off by default
	// (and in the daemon unless peers.enabled): without peers nobody reads them, and they would double
	// the compile cache's disk use (the tree holds the same bytes, extracted). Peers sets it.
	KeepBundles bool
	// Peers, when set, lets Restore download bundles from warm peers before the origin (see
	// PeerOptions); it implies KeepBundles (a peer download lands in the kept dir, verified).
	Peers *PeerOptions
	// InUse returns the trees running pods use, as "<component>/<path prefix>" or "" for the whole
	// SKU tree; bundles under them are never evicted. Nil: nothing is known to be in use.
	InUse func() []string
	// OpenWriters lists files some process holds open for writing; nil uses /proc. Files open for
	// writing are not complete and never captured.
	OpenWriters func() (map[FileID]bool, error)
	// ReadOnly opens an existing tree without creating anything, pointing the node link or sweeping
	// temp files: for commands that only read (`warmd cache ls`, `export`) while a daemon may be
	// writing. Its writing methods must not be called.
	ReadOnly bool
	Now      func() time.Time
	Log      *slog.Logger
}

// Manager owns one SKU's tree on this node: its records, capture, share, restore and eviction.
// Its methods are safe for concurrent use; captures, restores and evictions are serialized.
type Manager struct {
	o      Options
	layout Layout
	r      *roots
	log    *slog.Logger
	share  *Share       // nil when node-local
	kept   *fsroot.Root // KeptDir; nil unless KeepBundles
	client *http.Client // for peers, built on first use unless Peers.Client

	op sync.Mutex // serializes capture, restore, evict

	mu      sync.Mutex
	records map[string]*Record
	known   map[string]int64 // "<component>/<path>" -> size of a file a live record holds
	stats   Stats
}

// Stats counts what the manager did; it feeds the status section and metrics.
type Stats struct {
	LastCapture *time.Time `json:"lastCapture,omitempty"`
	LastUpload  *time.Time `json:"lastUpload,omitempty"`
	LastRestore *time.Time `json:"lastRestore,omitempty"`
	Captured    int        `json:"captured"`
	Uploaded    int        `json:"uploaded"`
	Restored    int        `json:"restored"`
	Rejected    int        `json:"rejected"`
	Evicted     int        `json:"evicted"`
	Pending     int        `json:"pending"` // files seen but not yet complete at the last capture
	// Skipped counts what the last capture found in the pod-written tree and never bundles: links,
	// special files, names that are not valid paths.
	Skipped       int    `json:"skipped,omitempty"`
	Conflicts     int    `json:"conflicts"`
	RemoteBundles int    `json:"remoteBundles"`
	Hits          int    `json:"hits"`
	Misses        int    `json:"misses"`
	LastMiss      string `json:"lastMiss,omitempty"`
	// PeerBytes and OriginBytes count restored bundle bytes by where they came from (warm peers, the
	// bucket); PeersDropped counts peers dropped from a restore (bad bytes, errors).
	PeerBytes    int64 `json:"peerBytes"`
	OriginBytes  int64 `json:"originBytes"`
	PeersDropped int   `json:"peersDropped,omitempty"`
	// Refused lists the latest bundles or indexes refused (another SKU's, corrupt), with why.
	Refused   []string `json:"refused,omitempty"`
	LastError string   `json:"lastError,omitempty"`
}

// ErrOtherSKU marks an index or bundle that belongs to another SKU: restoring it would make every
// vLLM start on this node silently recompile (or worse, load kernels built for another GPU).
var ErrOtherSKU = errors.New("compile cache of another GPU SKU")

// NewManager opens (and creates) the SKU's tree and loads its records.
func NewManager(o Options) (*Manager, error) {
	layout, err := NewLayout(o.DataDir, o.SKU)
	if err != nil {
		return nil, err
	}
	if o.EvictHold <= 0 {
		o.EvictHold = 6 * time.Hour
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.MinIdle <= 0 {
		o.MinIdle = time.Hour
	}
	if o.BundleBytes <= 0 {
		o.BundleBytes = 64 << 20
	}
	if o.BundleFiles <= 0 {
		o.BundleFiles = 4096
	}
	if o.MaxBundleBytes <= 0 {
		o.MaxBundleBytes = bundle.DefaultMaxBytes
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 4 << 30
	}
	o.MaxFileBytes = min(o.MaxFileBytes, o.MaxBundleBytes)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.OpenWriters == nil {
		o.OpenWriters = ProcOpenWriters
	}
	m := &Manager{o: o, layout: layout, log: o.Log.With("sku", o.SKU), records: map[string]*Record{}, known: map[string]int64{}}
	if o.Store != nil {
		if o.Bucket == "" {
			return nil, fmt.Errorf("compile-cache remote has no bucket: set compileCache.remote to s3://bucket/prefix")
		}
		m.share = &Share{Store: o.Store, Bucket: o.Bucket, Prefix: o.Prefix, SKU: o.SKU, Log: m.log}
	}
	if m.r, err = layout.open(!o.ReadOnly, m.log); err != nil {
		return nil, err
	}
	if !o.ReadOnly {
		if n, err := bundle.SweepTemps(m.r.tree); err != nil {
			m.r.close()
			return nil, err
		} else if n > 0 {
			m.log.Info("removed temp files of an interrupted restore", "files", n)
		}
	}
	if !o.ReadOnly && (o.KeepBundles || o.Peers != nil) {
		if err := m.openKept(); err != nil {
			m.r.close()
			return nil, err
		}
	}
	if err := m.loadRecords(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Close releases the manager's handles on its trees.
func (m *Manager) Close() error {
	if m.kept != nil {
		m.kept.Close()
	}
	m.r.close()
	return nil
}

// comp opens one component's tree. For a writer, a component dir a pod replaced by a link (or a
// file) is removed (the link itself, never what it points to) and made a dir again.
func (m *Manager) comp(c string, write bool) (*fsroot.Root, error) {
	p, err := fsroot.ParsePath(c)
	if err != nil || !validComponent(c) {
		return nil, fmt.Errorf("component %s is not one of %v", fsroot.Quote(c), Components)
	}
	var r *fsroot.Root
	if write {
		r, err = m.r.tree.Sub(p)
		if errors.Is(err, fsroot.ErrSymlink) || errors.Is(err, syscall.ENOTDIR) {
			m.log.Warn("a compile-cache component dir was replaced by a link or a file (by a pod?); removing it and recreating the dir", "path", m.r.tree.Name(p))
			if err = m.r.tree.RemoveAll(p); err == nil {
				r, err = m.r.tree.Sub(p)
			}
		}
	} else {
		r, err = subExisting(m.r.tree, p)
	}
	if err != nil {
		return nil, fmt.Errorf("open compile-cache component %s: %w", c, err)
	}
	return r, nil
}

// Layout returns the manager's paths.
func (m *Manager) Layout() Layout { return m.layout }

// Records returns copies of every record, live and evicted.
func (m *Manager) Records() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Record, 0, len(m.records))
	for _, r := range m.records {
		out = append(out, *r)
	}
	return out
}

// Stats returns a copy of the counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Refused = append([]string(nil), s.Refused...)
	return s
}

func (m *Manager) now() time.Time { return m.o.Now().UTC() }

func (m *Manager) setError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		m.stats.LastError = ""
		return
	}
	m.stats.LastError = err.Error()
}

func (m *Manager) refuse(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Rejected++
	m.stats.Refused = append(m.stats.Refused, what)
	if n := len(m.stats.Refused); n > 10 {
		m.stats.Refused = m.stats.Refused[n-10:]
	}
}

// checkManifest is the bundle reader's Check: only this SKU's bundles of the expected component,
// from a node name that is one, with versions that are what its paths say. Versions are shown in
// `warmd cache ls` and in miss reasons, so they must come from the entries (checked to the byte), not
// from text a bundle's writer chose. Messages quote only values that passed validation.
func (m *Manager) checkManifest(component string) func(*bundle.Manifest) error {
	return func(mf *bundle.Manifest) error {
		if mf.SKU != m.o.SKU {
			other := "an invalid SKU key"
			if CheckSKU(mf.SKU) == nil {
				other = fmt.Sprintf("SKU %q", mf.SKU)
			}
			return fmt.Errorf("%w: bundle was built on %s, this node is %q; not restored (its kernels would not load here)", ErrOtherSKU, other, m.o.SKU)
		}
		if !validComponent(mf.Component) {
			return fmt.Errorf("bundle names a component that is not one of %v", Components)
		}
		if component != "" && mf.Component != component {
			return fmt.Errorf("bundle holds component %q but was listed as %q", mf.Component, component)
		}
		if !validNodeName(mf.Node) {
			return errors.New("bundle's node field is not a Kubernetes node name")
		}
		var files []string
		for _, e := range mf.Entries {
			if e.Type == bundle.TypeFile {
				files = append(files, e.Path)
			}
		}
		if !maps.EqualFunc(mf.Versions, versionsOf(mf.Component, files), slices.Equal) {
			return errors.New("bundle's versions field does not match the versions its paths show")
		}
		return nil
	}
}

// validNodeName accepts "" and DNS-subdomain names (what Kubernetes allows a Node to be called).
func validNodeName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func validComponent(c string) bool {
	for _, k := range Components {
		if c == k {
			return true
		}
	}
	return false
}
