package bundle

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"time"

	"github.com/klauspost/compress/zstd"

	"warmd.io/warmd/pkg/fsroot"
)

// Result is what Write produced: the manifest and the bundle's content address.
type Result struct {
	Manifest Manifest
	// SHA256 of the compressed bundle bytes: its name.
	SHA256 string
	// Size of the compressed bundle.
	Size int64
}

// Write packs the named files of src into a bundle written to w. hdr supplies SKU, component, node and
// versions; entries and Bytes are filled in. The tar stream is deterministic (sorted names, zero
// times, no owners), so the same files give the same bytes. src is a pod-written tree: each file is
// opened through fsroot (no link followed at any element, no FIFO or device opened), so a pod that
// swaps a file or a dir for a link between capture's scan and this read cannot make warmd pack (and
// upload) a file from elsewhere. A file that was swapped, or changes size while it is read, fails the
// write with an error wrapping fs.ErrInvalid: capture only hands over stable files, and retries.
func Write(w io.Writer, src *fsroot.Root, paths []fsroot.Path, hdr Manifest) (Result, error) {
	files := make([]string, len(paths))
	for i, p := range paths {
		files[i] = p.String()
	}
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
		p, err := checkName(rel)
		if err != nil {
			return Result{}, fmt.Errorf("bundle %s: %w", quote(rel), err)
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
		e, err := addFile(tw, src, p)
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

func addFile(tw *tar.Writer, src *fsroot.Root, p fsroot.Path) (Entry, error) {
	rel := p.String()
	f, err := src.Open(p)
	if errors.Is(err, fsroot.ErrSymlink) || errors.Is(err, fsroot.ErrNotRegular) {
		return Entry{}, fmt.Errorf("bundle %s: %w: replaced by a link or a special file since it was seen (%w)", quote(rel), fs.ErrInvalid, err)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("bundle %s: %w", quote(rel), err)
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
