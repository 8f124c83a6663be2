package weights

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/pkg/prefetch"
)

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

func (e *Engine) recordPath(model string) string {
	return filepath.Join(e.recordDir(), ModelDirName(model)+".json")
}

func (e *Engine) readRecord(model string) (*record, error) {
	data, err := os.ReadFile(e.recordPath(model))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("weights record %s: %w", e.recordPath(model), err)
	}
	return &r, nil
}

func (e *Engine) writeRecord(r *record) error {
	data, _ := json.MarshalIndent(r, "", "  ")
	return writeFileAtomic(e.recordPath(r.Model), data)
}

// blobName names a file's blob: its sha256 when known (as Hugging Face does), else a stable id of
// what was fetched and verified (source, name, size, ETag, checksum), prefixed "warmd-".
func blobName(src string, sf stagedFile, fv prefetch.FileVerification) string {
	if strings.HasPrefix(fv.Digest, "sha256:") {
		return strings.TrimPrefix(fv.Digest, "sha256:")
	}
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d\x00%s\x00%s", src, sf.obj.Key, sf.obj.Size, sf.obj.ETag, fv.Digest)))
	return "warmd-" + hex.EncodeToString(h[:20])
}

// publish moves verified files into blobs/, builds snapshots/<rev> of relative symlinks in staging,
// and swaps it into place with one rename (RENAME_EXCHANGE when a snapshot of that revision already
// exists), then points refs/<rev> at it. Readers see the old snapshot or the new one, never a mix.
func (f *fetch) publish() error {
	e := f.e
	t0 := time.Now()
	defer func() { e.opts.Log.Debug("publish", "model", f.m.Name, "took", time.Since(t0).String()) }()
	for _, sf := range f.files {
		if err := sf.fh.Sync(); err != nil {
			return diskErr(fmt.Errorf("sync %s: %w", sf.path, err))
		}
	}
	if err := f.j.sync(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	modelDir := e.ModelDir(f.m.Name)
	blobs := filepath.Join(modelDir, "blobs")
	for _, d := range []string{blobs, filepath.Join(modelDir, "snapshots"), filepath.Join(modelDir, "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return diskErr(err)
		}
	}
	rec := &record{Model: f.m.Name, Revision: f.m.Revision, Source: f.src.String(), Bytes: f.status.BytesTotal,
		Published: e.opts.Now().UTC(), LastUsed: e.opts.Now().UTC(), Files: f.status.Files, Blobs: map[string]string{}}
	snap := filepath.Join(f.dir, "snapshot")
	if err := os.RemoveAll(snap); err != nil {
		return err
	}
	for i, sf := range f.files {
		name := blobName(f.src.String(), sf, f.status.Files[i])
		rec.Blobs[sf.obj.Key] = name
		dst := filepath.Join(blobs, name)
		if _, err := os.Stat(dst); err != nil {
			// A hard link, not a rename: staging stays whole until the snapshot is in place, so a
			// crash here resumes with nothing to refetch.
			if err := os.Link(sf.path, dst); err != nil {
				return diskErr(fmt.Errorf("publish blob %s: %w", sf.obj.Key, err))
			}
		}
		link := filepath.Join(snap, filepath.FromSlash(sf.obj.Key))
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return diskErr(err)
		}
		depth := strings.Count(path.Clean(sf.obj.Key), "/")
		target := strings.Repeat("../", depth+2) + "blobs/" + name
		if err := os.Symlink(target, link); err != nil {
			return diskErr(fmt.Errorf("link %s: %w", sf.obj.Key, err))
		}
	}
	if err := syncDir(blobs); err != nil {
		return err
	}
	final := e.SnapshotPath(f.m.Name, f.m.Revision)
	if err := os.Rename(snap, final); err != nil {
		if !errors.Is(err, os.ErrExist) && !errors.Is(err, unix.ENOTEMPTY) {
			return fmt.Errorf("publish snapshot %s: %w", final, err)
		}
		if err := unix.Renameat2(unix.AT_FDCWD, snap, unix.AT_FDCWD, final, unix.RENAME_EXCHANGE); err != nil {
			return fmt.Errorf("swap snapshot %s: %w", final, err)
		}
		os.RemoveAll(snap) // now the old snapshot
	}
	if err := syncDir(filepath.Dir(final)); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(modelDir, "refs", f.m.Revision), []byte(f.m.Revision)); err != nil {
		return diskErr(err)
	}
	if err := e.writeRecord(rec); err != nil {
		return diskErr(err)
	}
	e.gcBlobs(modelDir)
	f.j.close()
	if err := os.RemoveAll(f.dir); err != nil {
		e.opts.Log.Warn("could not clean staging after publish", "dir", f.dir, "err", err)
	}
	f.mu.Lock()
	f.status.State = prefetch.StateReady
	f.status.BytesDone = f.status.BytesTotal
	f.status.SnapshotPath = final
	f.status.Finished = e.opts.Now().UTC()
	f.status.BytesPerSecond, f.status.ETASeconds = 0, 0
	f.mu.Unlock()
	f.report(0)
	e.opts.Log.Info("model published", "model", f.m.Name, "revision", f.m.Revision, "snapshot", final)
	return nil
}

// gcBlobs removes blobs no snapshot links to (left by a replaced revision).
func (e *Engine) gcBlobs(modelDir string) {
	used := map[string]bool{}
	filepath.WalkDir(filepath.Join(modelDir, "snapshots"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type()&os.ModeSymlink != 0 {
			if t, err := os.Readlink(p); err == nil {
				used[path.Base(t)] = true
			}
		}
		return nil
	})
	entries, _ := os.ReadDir(filepath.Join(modelDir, "blobs"))
	for _, b := range entries {
		if !used[b.Name()] {
			os.Remove(filepath.Join(modelDir, "blobs", b.Name()))
		}
	}
}

func writeFileAtomic(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp"
	fh, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := fh.Write(data); err != nil {
		fh.Close()
		os.Remove(tmp)
		return err
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		os.Remove(tmp)
		return err
	}
	fh.Close()
	return os.Rename(tmp, p)
}

func syncDir(d string) error {
	fh, err := os.Open(d)
	if err != nil {
		return err
	}
	defer fh.Close()
	return fh.Sync()
}
