package bundle

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// Default reader limits: far above any real compile cache, far below what would fill a node's disk.
const (
	DefaultMaxBytes   = 16 << 30
	DefaultMaxEntries = 1 << 20
	maxManifestBytes  = 64 << 20
	maxWindow         = 1 << 23 // our writer uses 4 MiB windows; a bigger one only costs memory
)

// Options bound and check one extraction.
type Options struct {
	// MaxBytes caps the uncompressed tar stream. Default DefaultMaxBytes.
	MaxBytes int64
	// MaxEntries caps the number of tar entries. Default DefaultMaxEntries.
	MaxEntries int
	// SHA256 is the expected digest of the compressed bundle (its name); empty skips the check
	// (only for bundles whose name is not known, e.g. fuzzing).
	SHA256 string
	// Check may refuse the manifest (e.g. another SKU's); its error is wrapped in ErrRejected and
	// nothing is committed.
	Check func(*Manifest) error
	// Sync flushes the file system before files are renamed into place, so a power loss cannot
	// leave a renamed file with missing data.
	Sync bool
	// VerifyEntries hashes every file against its manifest entry even when SHA256 is given. Without
	// it, a bundle whose name (sha256 of all its bytes) checks out is trusted for its entries' digests
	// and only their sizes are compared: the name already proves every byte is what was uploaded, and
	// the second hash would cost a CPU-second per GiB. Paths, types and limits are checked either way.
	// Without SHA256 entries are always hashed.
	VerifyEntries bool
}

// Extracted reports what an extraction did.
type Extracted struct {
	Manifest Manifest
	// Written files were renamed into place; Existing ones were already there with equal content.
	Written, Existing int
	// Conflicts are paths where a different file already existed; it was kept, the bundle's copy dropped.
	Conflicts []string
	// Bytes is the uncompressed size of the tar stream.
	Bytes int64
}

type pending struct {
	tmp, final string
	size       int64
	sum        string // empty when the entry was not hashed (see Options.VerifyEntries)
}

// Extract reads a bundle from r into dest (which must exist) and commits it only if every entry is
// safe, the stream is complete, the digest and manifest match and Check accepts the manifest. On any
// error nothing new is left in dest except empty dirs it had to create and then could not remove.
func Extract(r io.Reader, dest string, o Options) (*Extracted, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return nil, fmt.Errorf("open extract dir: %w", err)
	}
	defer root.Close()
	x := &extraction{root: root, d: newDirs(root), o: o, seen: map[string]string{}}
	defer x.d.close()
	res, err := x.run(r)
	if err != nil {
		x.cleanup()
		return nil, err
	}
	return res, nil
}

type extraction struct {
	root     *os.Root
	d        *dirs
	o        Options
	files    []pending
	links    [][2]string // name, target
	created  []string    // dirs we created, outermost first
	seen     map[string]string
	manifest *Manifest
	buf      []byte
}

func (x *extraction) run(r io.Reader) (*Extracted, error) {
	h := sha256.New()
	in := io.TeeReader(r, h)
	dec, err := zstd.NewReader(in, zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderMaxMemory(uint64(x.o.MaxBytes)),
		zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	defer dec.Close()
	lim := &limitReader{r: dec, left: x.o.MaxBytes}
	tr := tar.NewReader(lim)
	x.buf = make([]byte, 1<<20)
	n := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, x.streamErr(err)
		}
		if n++; n > x.o.MaxEntries {
			return nil, fmt.Errorf("%w: more than %d entries", ErrTooLarge, x.o.MaxEntries)
		}
		if x.manifest != nil {
			return nil, fmt.Errorf("%w: entry %q after the manifest", ErrCorrupt, hdr.Name)
		}
		if err := x.entry(tr, hdr); err != nil {
			return nil, x.streamErr(err)
		}
	}
	// Drain the compressed stream so the digest covers every byte and trailing garbage is caught.
	if _, err := io.Copy(io.Discard, lim); err != nil {
		return nil, x.streamErr(err)
	}
	if _, err := io.Copy(io.Discard, in); err != nil {
		return nil, x.streamErr(err)
	}
	if x.manifest == nil {
		return nil, fmt.Errorf("%w: no manifest (truncated or not a warmd bundle)", ErrCorrupt)
	}
	if x.o.SHA256 != "" {
		if got := hex.EncodeToString(h.Sum(nil)); got != x.o.SHA256 {
			return nil, fmt.Errorf("%w: sha256 %s, expected %s (download again; a mismatch that repeats means the object was replaced)", ErrCorrupt, got, x.o.SHA256)
		}
	}
	if err := x.matchManifest(); err != nil {
		return nil, err
	}
	if x.o.Check != nil {
		if err := x.o.Check(x.manifest); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRejected, err)
		}
	}
	res := &Extracted{Manifest: *x.manifest, Bytes: x.o.MaxBytes - lim.left}
	if err := x.commit(res); err != nil {
		return nil, err
	}
	return res, nil
}

// streamErr classifies errors from the decoder or tar reader: limits stay ErrTooLarge, our own
// classified errors pass through, everything else is a corrupt (truncated, malformed) stream.
func (x *extraction) streamErr(err error) error {
	for _, known := range []error{ErrTooLarge, ErrUnsafe, ErrCorrupt, ErrRejected} {
		if errors.Is(err, known) {
			return err
		}
	}
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("extract: %w", err) // a local I/O problem, not the bundle's fault
	}
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}

func (x *extraction) entry(tr *tar.Reader, hdr *tar.Header) error {
	name := strings.TrimSuffix(hdr.Name, "/")
	if name == ManifestName && (hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA) {
		if hdr.Size > maxManifestBytes {
			return fmt.Errorf("%w: manifest of %d bytes", ErrTooLarge, hdr.Size)
		}
		data, err := io.ReadAll(io.LimitReader(tr, hdr.Size))
		if err != nil {
			return err
		}
		var m Manifest
		dj := json.NewDecoder(bytes.NewReader(data))
		dj.DisallowUnknownFields()
		if err := dj.Decode(&m); err != nil {
			return fmt.Errorf("%w: manifest: %w", ErrCorrupt, err)
		}
		if m.Schema < 1 || m.Schema > Schema {
			return fmt.Errorf("%w: manifest schema %d; this warmd reads up to %d (upgrade warmd)", ErrCorrupt, m.Schema, Schema)
		}
		x.manifest = &m
		return nil
	}
	if err := checkName(name); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrUnsafe, hdr.Name, err)
	}
	if strings.HasPrefix(name, ".warmd/") || name == ".warmd" {
		return fmt.Errorf("%w: %q uses the reserved .warmd/ dir", ErrUnsafe, hdr.Name)
	}
	if _, dup := x.seen[name]; dup {
		return fmt.Errorf("%w: %q appears twice", ErrCorrupt, name)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		x.seen[name] = TypeDir
		return x.mkdirs(name)
	case tar.TypeReg, tar.TypeRegA:
		x.seen[name] = TypeFile
		return x.file(tr, name, hdr)
	case tar.TypeSymlink:
		t := hdr.Linkname
		if t == "" || path.IsAbs(t) || strings.ContainsRune(t, 0) {
			return fmt.Errorf("%w: symlink %q -> %q escapes the tree", ErrUnsafe, name, t)
		}
		if j := path.Join(path.Dir(name), t); j == ".." || strings.HasPrefix(j, "../") {
			return fmt.Errorf("%w: symlink %q -> %q escapes the tree", ErrUnsafe, name, t)
		}
		x.seen[name] = TypeSymlink
		x.links = append(x.links, [2]string{name, t})
		return nil
	case tar.TypeLink:
		target := path.Clean(hdr.Linkname)
		i := slices.IndexFunc(x.files, func(p pending) bool { return p.final == target })
		if i < 0 {
			return fmt.Errorf("%w: hardlink %q -> %q does not name an earlier file of this bundle", ErrUnsafe, name, hdr.Linkname)
		}
		x.seen[name] = TypeFile
		if err := x.mkdirs(path.Dir(name)); err != nil {
			return err
		}
		tmp := tempName(name)
		if err := x.d.link(x.files[i].tmp, tmp); err != nil {
			return err
		}
		x.files = append(x.files, pending{tmp: tmp, final: name, size: x.files[i].size, sum: x.files[i].sum})
		return nil
	}
	return fmt.Errorf("%w: %q has type %q; only files, dirs and in-tree links are allowed", ErrUnsafe, name, string(hdr.Typeflag))
}

func (x *extraction) file(tr *tar.Reader, name string, hdr *tar.Header) error {
	if hdr.Size < 0 {
		return fmt.Errorf("%w: %q has negative size", ErrCorrupt, name)
	}
	if err := x.mkdirs(path.Dir(name)); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if hdr.Mode&0o111 != 0 {
		mode = 0o755
	}
	tmp := tempName(name)
	f, err := x.d.create(tmp, mode)
	if err != nil {
		return err
	}
	x.files = append(x.files, pending{tmp: tmp, final: name, size: hdr.Size})
	p := &x.files[len(x.files)-1]
	var h hash.Hash
	var w io.Writer = f
	if x.o.SHA256 == "" || x.o.VerifyEntries {
		h = sha256.New()
		w = io.MultiWriter(f, h)
	}
	n, err := copyBuf(w, tr, x.buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n != hdr.Size {
		return fmt.Errorf("%w: %q has %d of %d bytes", ErrCorrupt, name, n, hdr.Size)
	}
	if h != nil {
		p.sum = hex.EncodeToString(h.Sum(nil))
	}
	return nil
}

func (x *extraction) mkdirs(dir string) error {
	if dir == "." || dir == "" {
		return nil
	}
	return x.d.mkdir(dir, func(d string) { x.created = append(x.created, d) })
}

func (x *extraction) matchManifest() error {
	m := x.manifest
	want := map[string]Entry{}
	for _, e := range m.Entries {
		want[path.Clean(e.Path)] = e
	}
	nfiles := 0
	for _, e := range m.Entries {
		if e.Type == TypeFile {
			nfiles++
		}
	}
	if nfiles != len(x.files) {
		return fmt.Errorf("%w: manifest lists %d files, bundle holds %d", ErrCorrupt, nfiles, len(x.files))
	}
	for i := range x.files {
		p := &x.files[i]
		e, ok := want[p.final]
		if !ok || e.Type != TypeFile || e.Size != p.size || (p.sum != "" && e.SHA256 != p.sum) {
			return fmt.Errorf("%w: %q does not match its manifest entry", ErrCorrupt, p.final)
		}
		if p.sum == "" {
			p.sum = e.SHA256 // vouched for by the bundle's own digest
		}
	}
	for _, l := range x.links {
		if e, ok := want[l[0]]; !ok || e.Type != TypeSymlink || e.Target != l[1] {
			return fmt.Errorf("%w: symlink %q does not match its manifest entry", ErrCorrupt, l[0])
		}
	}
	return nil
}

func (x *extraction) commit(res *Extracted) error {
	if x.o.Sync {
		if f, err := x.root.Open("."); err == nil {
			_ = unix.Syncfs(int(f.Fd()))
			f.Close()
		}
	}
	for i := range x.files {
		p := &x.files[i]
		exists, err := x.d.renameNew(p.tmp, p.final)
		if err != nil {
			return err
		}
		if !exists {
			p.tmp = ""
			res.Written++
			continue
		}
		if x.d.sameFile(p.final, p.size, p.sum, x.buf) {
			res.Existing++
		} else {
			res.Conflicts = append(res.Conflicts, p.final)
		}
		x.d.remove(p.tmp)
		p.tmp = ""
	}
	for _, l := range x.links {
		exists, same, err := x.d.symlink(l[1], l[0])
		if err != nil {
			return err
		}
		if exists && !same {
			res.Conflicts = append(res.Conflicts, l[0])
		}
	}
	x.created = nil // committed: keep the dirs
	return nil
}

// cleanup removes temp files and the dirs this extraction created (when empty).
func (x *extraction) cleanup() {
	for _, p := range x.files {
		if p.tmp != "" {
			x.d.remove(p.tmp)
		}
	}
	for i := len(x.created) - 1; i >= 0; i-- {
		x.d.rmdir(x.created[i])
	}
}

// checkName accepts only clean, relative, slash-separated names inside the tree.
func checkName(name string) error {
	switch {
	case name == "" || name == ".":
		return errors.New("empty name")
	case len(name) > 4096:
		return errors.New("name too long")
	case strings.HasPrefix(name, "/"):
		return errors.New("absolute path")
	case strings.ContainsAny(name, "\x00\\"):
		return errors.New("NUL or backslash in name")
	case IsTemp(name):
		return errors.New("temp-file marker in name")
	}
	for _, el := range strings.Split(name, "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("path element %q", el)
		}
	}
	return nil
}

func tempName(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return path.Join(path.Dir(name), "."+path.Base(name)+TempMarker+hex.EncodeToString(b[:]))
}

func copyBuf(w io.Writer, r io.Reader, buf []byte) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, buf)
}

type limitReader struct {
	r    io.Reader
	left int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// Probe one byte: a stream that ends exactly at the limit is fine.
		var one [1]byte
		if n, err := l.r.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("%w: uncompressed stream larger than the limit", ErrTooLarge)
		} else {
			return 0, err
		}
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
