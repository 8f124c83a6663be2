package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"

	"warmd.io/warmd/pkg/fsroot"
)

// KeptDir is where verified bundles are kept for peers, below the data dir: one file per bundle,
// named by its sha256 (64 lowercase hex digits) and nothing else, so the peer server can find a bundle
// by the digest in a URL without reading any index, and a temp file (".<name>.warmd-tmp-…") can never
// be asked for by a valid digest.
//
//	<dataDir>/compile-cache/.kept/sha256/<hex>
//
// Only bundles whose bytes hashed to their name are committed here (fsroot temp + rename), and only
// those the SKU's current index references stay: Restore deletes the rest on each pass, Evict deletes
// the copy of a bundle it evicts, and their bytes count against compileCache.budget.
const KeptDir = "compile-cache/.kept/sha256"

// keptRel is KeptDir below the compile-cache dir (the manager's base root).
var keptRel = fsroot.MustPath(".kept/sha256")

// OpenKept opens (creating) the kept-bundle dir under dataDir, for the peer server.
func OpenKept(dataDir string) (*fsroot.Root, error) {
	base, err := fsroot.Open(filepath.Join(dataDir, "compile-cache"))
	if err != nil {
		return nil, fmt.Errorf("open compile-cache dir: %w", err)
	}
	defer base.Close()
	if err := base.MkdirAll(keptRel, 0o755); err != nil {
		return nil, fmt.Errorf("create kept-bundle dir: %w", err)
	}
	return base.Sub(keptRel)
}

// openKept opens the manager's kept dir and removes temp files an interrupted write left there.
func (m *Manager) openKept() error {
	if err := m.r.base.MkdirAll(keptRel, 0o755); err != nil {
		return fmt.Errorf("create kept-bundle dir: %w", err)
	}
	k, err := m.r.base.Sub(keptRel)
	if err != nil {
		return fmt.Errorf("open kept-bundle dir: %w", err)
	}
	if n, err := k.RemoveTemps(fsroot.Path{}); err != nil {
		k.Close()
		return fmt.Errorf("sweep kept-bundle dir: %w", err)
	} else if n > 0 {
		m.log.Info("removed temp files of an interrupted bundle download", "files", n)
	}
	m.kept = k
	return nil
}

// keepCaptured moves a captured bundle that Upload has published from the records dir into the kept
// dir, or removes it when bundles are not kept. Its digest is what the writer computed as it wrote
// it; a rename within the compile-cache dir never exposes a partial file under the final name.
func (m *Manager) keepCaptured(sha string) {
	if m.kept == nil || !validSHA256(sha) {
		_ = m.r.recs.Remove(pendingPath(sha))
		return
	}
	from := fsroot.MustPath(".bundles/" + m.o.SKU).Join(pendingPath(sha))
	if err := m.r.base.Rename(from, keptRel.Join(fsroot.MustPath(sha))); err != nil {
		m.log.Warn("could not keep a captured bundle for peers", "bundle", sha[:12], "err", err)
		_ = m.r.recs.Remove(pendingPath(sha))
	}
}

// keeper receives a bundle's bytes as they arrive, hashes and counts them, and writes them to a temp
// file in the kept dir; commit keeps them under the digest only when they are exactly the bundle the
// index names. A failed write stops keeping, never the download.
type keeper struct {
	m   *Manager
	t   *fsroot.Temp // nil: not keeping
	h   hash.Hash
	n   int64
	err error
}

func (m *Manager) newKeeper() *keeper {
	k := &keeper{m: m, h: sha256.New()}
	if m.kept != nil {
		t, err := m.kept.CreateTemp(fsroot.Path{}, "bundle")
		if err != nil {
			m.log.Warn("cannot keep a bundle for peers", "err", err)
		} else {
			k.t = t
		}
	}
	return k
}

// Write implements io.Writer; it never fails.
func (k *keeper) Write(p []byte) (int, error) {
	k.n += int64(len(p))
	k.h.Write(p)
	if k.t != nil && k.err == nil {
		_, k.err = k.t.Write(p)
	}
	return len(p), nil
}

// matches reports whether the bytes seen are the bundle e names (size and sha256).
func (k *keeper) matches(e IndexEntry) bool {
	return k.n == e.Size && hex.EncodeToString(k.h.Sum(nil)) == e.SHA256
}

// commit keeps the bytes under e's digest when they match it; otherwise it drops them.
func (k *keeper) commit(e IndexEntry) error {
	if k.t == nil {
		return nil
	}
	defer k.t.Abort()
	if k.err != nil {
		return fmt.Errorf("keep bundle %s: %w", e.SHA256[:12], k.err)
	}
	if !k.matches(e) || !validSHA256(e.SHA256) {
		return fmt.Errorf("keep bundle %s: bytes do not match the index's size and sha256", e.SHA256[:12])
	}
	if err := k.t.Chmod(0o644); err != nil {
		return fmt.Errorf("keep bundle %s: %w", e.SHA256[:12], err)
	}
	if err := k.t.Commit(fsroot.MustPath(e.SHA256)); err != nil {
		return fmt.Errorf("keep bundle %s: %w", e.SHA256[:12], err)
	}
	return nil
}

// abort drops the bytes.
func (k *keeper) abort() {
	if k.t != nil {
		k.t.Abort()
	}
}

// openKeptBundle opens the kept copy of sha (fs.ErrNotExist when there is none).
func (m *Manager) openKeptBundle(sha string) (*os.File, error) {
	if m.kept == nil || !validSHA256(sha) {
		return nil, fs.ErrNotExist
	}
	return m.kept.Open(fsroot.MustPath(sha))
}

// removeKept deletes the kept copy of sha and returns its size (0 when there was none).
func (m *Manager) removeKept(sha string) int64 {
	if m.kept == nil || !validSHA256(sha) {
		return 0
	}
	p := fsroot.MustPath(sha)
	fi, err := m.kept.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return 0
	}
	if err := m.kept.Remove(p); err != nil {
		m.log.Warn("could not remove a kept bundle", "bundle", sha[:12], "err", err)
		return 0
	}
	return fi.Size()
}

// pruneKept deletes every kept file the index does not reference (and anything that is not a bundle
// name), so the kept set never outgrows the SKU's current index. Temp files are left to their
// writers: prune runs under the op lock, after this pass's downloads finished.
func (m *Manager) pruneKept(idx Index) (removed int, err error) {
	if m.kept == nil {
		return 0, nil
	}
	want := make(map[string]bool, len(idx.Bundles))
	for _, e := range idx.Bundles {
		want[e.SHA256] = true
	}
	ents, err := m.kept.ReadDir(fsroot.Path{})
	if err != nil {
		return 0, fmt.Errorf("list kept bundles: %w", err)
	}
	for _, d := range ents {
		name := d.Name()
		if fsroot.IsTemp(name) || (want[name] && d.Type().IsRegular()) {
			continue
		}
		p, perr := fsroot.ParsePath(name)
		if perr != nil {
			continue
		}
		if rerr := m.kept.RemoveAll(p); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove kept bundle: %w", rerr))
			continue
		}
		removed++
	}
	if removed > 0 {
		m.log.Info("removed kept bundles the index no longer references", "bundles", removed)
	}
	return removed, err
}

// KeptBundles counts the bundles kept for peers and their bytes.
func (m *Manager) KeptBundles() (n int, bytes int64) {
	if m.kept == nil {
		return 0, 0
	}
	ents, err := m.kept.ReadDir(fsroot.Path{})
	if err != nil {
		return 0, 0
	}
	for _, d := range ents {
		if !d.Type().IsRegular() || !validSHA256(d.Name()) {
			continue
		}
		if fi, err := d.Info(); err == nil {
			n++
			bytes += fi.Size()
		}
	}
	return n, bytes
}

// dropKept removes the kept dir of a daemon that no longer keeps bundles (peers.enabled turned off):
// nothing bounds or serves it any more. Only the daemon part calls it; a command's manager never
// does, since it may run beside a daemon that keeps them.
func (m *Manager) dropKept() {
	if m.kept != nil {
		return
	}
	if _, err := m.r.base.Lstat(keptRel); err != nil {
		return
	}
	if err := m.r.base.RemoveAll(keptRel.Dir()); err != nil {
		m.log.Warn("could not remove the kept bundles of an earlier run with peers", "err", err)
		return
	}
	m.log.Info("removed the bundles kept for peers: peers.enabled is off")
}
