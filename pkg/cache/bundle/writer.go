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
	"syscall"
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
// write with a *SkipError naming it (it wraps fs.ErrInvalid): capture only hands over stable files,
// and writes the bundle again without it.
func Write(w io.Writer, src *fsroot.Root, paths []fsroot.Path, hdr Manifest) (Result, error) {
	return WriteLimited(w, src, paths, hdr, Limits{})
}

// WriteLimited is Write that also refuses, with a *SkipError naming the file, a file over lim's size
// and a sparse one (IsSparse), judged on the handle it reads: a pod that grows or punches a file
// between the caller's scan and this read cannot make it pack gigabytes of zeros. Each file is read
// only up to the size its handle had when opened, and its size and mtime are checked again after.
func WriteLimited(w io.Writer, src *fsroot.Root, paths []fsroot.Path, hdr Manifest, lim Limits) (Result, error) {
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
		e, err := addFile(tw, src, p, lim)
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

func addFile(tw *tar.Writer, src *fsroot.Root, p fsroot.Path, lim Limits) (Entry, error) {
	rel := p.String()
	f, err := src.Open(p)
	switch {
	case errors.Is(err, fsroot.ErrSymlink) || errors.Is(err, fsroot.ErrNotRegular):
		return Entry{}, skipped(p, SkipNotPlain, fmt.Errorf("replaced by a link or a special file since it was seen (%w)", err))
	case errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP):
		// A dir on its path was swapped for a file or a link since the scan (opening a link with
		// O_DIRECTORY|O_NOFOLLOW fails with ENOTDIR): the pod's tree moved under us, this file only.
		return Entry{}, skipped(p, SkipNotPlain, fmt.Errorf("a directory on its path was replaced since it was seen (%w)", err))
	case errors.Is(err, fs.ErrNotExist):
		return Entry{}, skipped(p, SkipGone, err)
	case err != nil:
		return Entry{}, fmt.Errorf("bundle %s: %w", quote(rel), err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Entry{}, fmt.Errorf("bundle %s: %w", quote(rel), err)
	}
	if !st.Mode().IsRegular() {
		return Entry{}, skipped(p, SkipNotPlain, fmt.Errorf("%w: only regular files are captured, not %s", ErrUnsafe, st.Mode().Type()))
	}
	size := st.Size()
	if lim.MaxFileBytes > 0 && size > lim.MaxFileBytes {
		return Entry{}, skipped(p, SkipTooLarge, fmt.Errorf("%d bytes, more than the %d a captured file may hold", size, lim.MaxFileBytes))
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		sparse, err := IsSparse(f, size, sys.Blocks*512)
		if err != nil {
			return Entry{}, fmt.Errorf("bundle %s: %w", quote(rel), err)
		}
		if sparse {
			return Entry{}, skipped(p, SkipSparse, fmt.Errorf("%d bytes, mostly holes", size))
		}
	}
	mode := uint32(0o644)
	if st.Mode().Perm()&0o111 != 0 {
		mode = 0o755
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Size: size, Mode: int64(mode), Format: tar.FormatPAX}); err != nil {
		return Entry{}, fmt.Errorf("write bundle: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(f, size))
	if err != nil {
		return Entry{}, fmt.Errorf("bundle %s: %w", quote(rel), err)
	}
	if n != size {
		return Entry{}, skipped(p, SkipChanged, fmt.Errorf("shrank from %d to %d bytes while being read", size, n))
	}
	if st2, err := f.Stat(); err != nil || st2.Size() != size || !st2.ModTime().Equal(st.ModTime()) {
		return Entry{}, skipped(p, SkipChanged, errors.New("its size or mtime changed while it was read"))
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
