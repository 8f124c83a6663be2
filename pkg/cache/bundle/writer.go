package bundle

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Result is what Write produced: the manifest and the bundle's content address.
type Result struct {
	Manifest Manifest
	// SHA256 of the compressed bundle bytes: its name.
	SHA256 string
	// Size of the compressed bundle.
	Size int64
}

// Write packs the named files (paths relative to root, slash-separated) into a bundle written to w.
// hdr supplies SKU, component, node and versions; entries and Bytes are filled in. The tar stream is
// deterministic (sorted names, zero times, no owners), so the same files give the same bytes.
// A file that changes size while it is read fails the write: capture only hands over stable files.
func Write(w io.Writer, root string, files []string, hdr Manifest) (Result, error) {
	files = slices.Clone(files)
	slices.Sort(files)
	files = slices.Compact(files)
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(w, h)}
	enc, err := zstd.NewWriter(cw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(true),
		zstd.WithWindowSize(1<<22))
	if err != nil {
		return Result{}, fmt.Errorf("start zstd: %w", err)
	}
	tw := tar.NewWriter(enc)
	m := hdr
	m.Schema = Schema
	m.Entries = nil
	m.Bytes = 0
	if m.Created.IsZero() {
		m.Created = time.Now().UTC()
	}
	dirs := map[string]bool{}
	for _, rel := range files {
		if err := checkName(rel); err != nil {
			return Result{}, fmt.Errorf("bundle %s: %w", rel, err)
		}
		// Parent dirs first, so the reader creates them with sane modes.
		for _, d := range parents(rel) {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, Format: tar.FormatPAX}); err != nil {
				return Result{}, fmt.Errorf("write bundle: %w", err)
			}
			m.Entries = append(m.Entries, Entry{Path: d, Type: TypeDir, Mode: 0o755})
		}
		e, err := addFile(tw, root, rel)
		if err != nil {
			return Result{}, err
		}
		m.Bytes += e.Size
		m.Entries = append(m.Entries, e)
	}
	mj, err := json.Marshal(m)
	if err != nil {
		return Result{}, fmt.Errorf("encode manifest: %w", err)
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: ManifestName, Size: int64(len(mj)), Mode: 0o644, Format: tar.FormatPAX}); err != nil {
		return Result{}, fmt.Errorf("write bundle: %w", err)
	}
	if _, err := tw.Write(mj); err != nil {
		return Result{}, fmt.Errorf("write bundle: %w", err)
	}
	if err := tw.Close(); err != nil {
		return Result{}, fmt.Errorf("write bundle: %w", err)
	}
	if err := enc.Close(); err != nil {
		return Result{}, fmt.Errorf("write bundle: %w", err)
	}
	return Result{Manifest: m, SHA256: hex.EncodeToString(h.Sum(nil)), Size: cw.n}, nil
}

func addFile(tw *tar.Writer, root, rel string) (Entry, error) {
	f, err := os.Open(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return Entry{}, fmt.Errorf("bundle %s: %w", rel, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Entry{}, fmt.Errorf("bundle %s: %w", rel, err)
	}
	if !st.Mode().IsRegular() {
		return Entry{}, fmt.Errorf("bundle %s: %w: only regular files are captured, not %s", rel, ErrUnsafe, st.Mode().Type())
	}
	mode := uint32(0o644)
	if st.Mode().Perm()&0o111 != 0 {
		mode = 0o755
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Size: st.Size(), Mode: int64(mode), Format: tar.FormatPAX}); err != nil {
		return Entry{}, fmt.Errorf("write bundle: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(f, st.Size()))
	if err != nil {
		return Entry{}, fmt.Errorf("bundle %s: %w", rel, err)
	}
	if n != st.Size() {
		return Entry{}, fmt.Errorf("bundle %s: shrank from %d to %d bytes while being read: %w", rel, st.Size(), n, fs.ErrInvalid)
	}
	if st2, err := f.Stat(); err != nil || st2.Size() != st.Size() || !st2.ModTime().Equal(st.ModTime()) {
		return Entry{}, fmt.Errorf("bundle %s: changed while being read: %w", rel, fs.ErrInvalid)
	}
	return Entry{Path: rel, Type: TypeFile, Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), Mode: mode}, nil
}

// parents lists the parent dirs of a slash path, outermost first.
func parents(rel string) []string {
	var out []string
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' {
			out = append(out, rel[:i])
		}
	}
	return out
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
