package bundle

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/klauspost/compress/zstd"

	"warmd.io/warmd/pkg/fsroot"
)

// Options bound and check one extraction.
type Options struct {
	// MaxBytes caps what the bundle materialises: the sum of its files' sizes, counted from each
	// entry's header before a byte of it is written (so neither a zstd bomb nor a sparse entry can
	// write more). The decompressed stream may exceed it only by per-entry header room.
	// Default DefaultMaxBytes.
	MaxBytes int64
	// MaxEntryBytes caps one file. Default MaxBytes.
	MaxEntryBytes int64
	// MaxEntries caps the number of tar entries. Default DefaultMaxEntries.
	MaxEntries int
	// SHA256 is the expected digest of the compressed bundle (its name); empty skips the check
	// (bundles whose name is not known yet: Scan, fuzzing). Extracted.SHA256 is what was read.
	SHA256 string
	// Expect is the manifest the bundle was published with (the bucket's <sha256>.json, or what Scan
	// read from a local file). With it, every entry must be one Expect lists, with its type, size and
	// target, checked from the entry's header before anything is written; files are hashed against
	// its digests as they stream; and the bundle's own manifest must equal it. Expect.Bytes then
	// lowers MaxBytes.
	Expect *Manifest
	// Check may refuse the manifest (e.g. another SKU's); its error is wrapped in ErrRejected and
	// nothing is committed.
	Check func(*Manifest) error
	// Sync flushes the file system before files are renamed into place, so a power loss cannot
	// leave a renamed file with missing data.
	Sync bool
	// Reserve is the free space the extraction must leave on dest's file system; it checks before
	// every file and every 32 MiB, and stops with ErrNoSpace. Zero: DefaultReserve of the file
	// system's size. Negative: no free-space check (tests of other limits).
	Reserve int64
	// Statfs reports free and total bytes of dest's file system; nil asks the kernel (fstatfs).
	Statfs func() (free, total int64, err error)
}

// Extracted reports what an extraction did.
type Extracted struct {
	Manifest Manifest
	// Written files were renamed into place; Existing ones were already there with equal content.
	// Links are the in-tree symlinks created (or found already there, the same).
	Written, Existing, Links int
	// Conflicts are the entries left out, each verified but not written: a different file or link
	// already stood at the path (it was kept), or one of the path's dirs is a link or a file in the
	// tree (a pod put it there). The rest of the bundle is restored.
	Conflicts []string
	// Bytes is what the bundle's files hold (materialised bytes).
	Bytes int64
	// SHA256 and Size describe the compressed bundle as read.
	SHA256 string
	Size   int64
}

type pending struct {
	tmp, final fsroot.Path // tmp is the zero Path once published (or when scanning)
	size       int64
	sum        string
	blocked    bool // a dir of final is not a dir in the tree: verified, never written
}

// Extract reads a bundle from r into dest (which must exist) and commits it only if every entry is
// safe and within the limits, the stream is complete, every file's sha256 matches its manifest entry,
// the bundle's digest and Expect match and Check accepts the manifest. On any error nothing new is
// left in dest except empty dirs it had to create and then could not remove.
func Extract(r io.Reader, dest *fsroot.Root, o Options) (*Extracted, error) {
	if o.Statfs == nil && o.Reserve >= 0 {
		o.Statfs = dest.Statfs
	}
	x := newExtraction(o)
	x.d = newDirs(dest)
	defer x.d.close()
	res, err := x.run(r)
	if err != nil {
		x.cleanup()
		return nil, err
	}
	return res, nil
}

// Scan reads a whole bundle and applies every check Extract does except those against the tree
// (existing files), writing nothing. Import runs it first on a local file: the manifest it returns
// is then Expect for the extraction, so every entry is bounded by its declared size before it is
// written, as on a restore from the bucket.
func Scan(r io.Reader, o Options) (*Extracted, error) {
	o.Reserve = -1
	return newExtraction(o).run(r)
}

func newExtraction(o Options) *extraction {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	x := &extraction{o: o, seen: map[string]string{}}
	if o.Expect != nil {
		o.MaxBytes = min(o.MaxBytes, o.Expect.Bytes)
		o.MaxEntries = min(o.MaxEntries, len(o.Expect.Entries)+1)
		x.expect = make(map[string]Entry, len(o.Expect.Entries))
		for _, e := range o.Expect.Entries {
			x.expect[e.Path] = e
		}
	}
	if o.MaxEntryBytes <= 0 || o.MaxEntryBytes > o.MaxBytes {
		o.MaxEntryBytes = o.MaxBytes
	}
	x.o = o
	x.b = budget{maxBytes: o.MaxBytes, maxEntry: o.MaxEntryBytes, reserve: o.Reserve}
	if o.Reserve >= 0 {
		x.b.statfs = o.Statfs
	}
	return x
}

type extraction struct {
	d        *dirs // nil when scanning
	o        Options
	b        budget
	lim      *limitReader
	expect   map[string]Entry
	files    []pending
	byName   map[string]int // final name -> index in files
	links    []link
	created  []fsroot.Path // dirs we created, outermost first
	seen     map[string]string
	n        int // tar entries read, for naming an entry whose name cannot be trusted
	manifest *Manifest
	buf      []byte
}

func (x *extraction) run(r io.Reader) (*Extracted, error) {
	h := sha256.New()
	cr := &countReader{r: r}
	in := io.TeeReader(cr, h)
	dec, err := zstd.NewReader(in, zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderMaxMemory(uint64(x.o.MaxBytes)+maxManifestBytes),
		zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	defer dec.Close()
	x.lim = &limitReader{r: dec, left: entryOverhead}
	tr := tar.NewReader(x.lim)
	x.buf = make([]byte, 1<<20)
	x.byName = map[string]int{}
	var need int64 // the whole bundle, when its size is declared: refuse before reading any of it
	if x.o.Expect != nil {
		if err := x.o.Expect.Validate(); err != nil {
			return nil, fmt.Errorf("%w: published manifest: %w", ErrCorrupt, err)
		}
		need = x.o.Expect.Bytes
	}
	if err := x.b.space(need); err != nil {
		return nil, err
	}
	n := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, x.streamErr(err)
		}
		x.n = n + 1
		if n++; n > x.o.MaxEntries {
			return nil, fmt.Errorf("%w: more than %d entries", ErrTooLarge, x.o.MaxEntries)
		}
		if x.manifest != nil {
			return nil, fmt.Errorf("%w: tar entry %d comes after the manifest", ErrCorrupt, n-1)
		}
		x.lim.left += entryOverhead // room for the next header
		if err := x.entry(tr, hdr); err != nil {
			return nil, x.streamErr(err)
		}
	}
	// Drain the compressed stream so the digest covers every byte and trailing garbage is caught.
	if _, err := io.Copy(io.Discard, x.lim); err != nil {
		return nil, x.streamErr(err)
	}
	if _, err := io.Copy(io.Discard, in); err != nil {
		return nil, x.streamErr(err)
	}
	if x.manifest == nil {
		return nil, fmt.Errorf("%w: no manifest (truncated or not a warmd bundle)", ErrCorrupt)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if x.o.SHA256 != "" && got != x.o.SHA256 {
		return nil, fmt.Errorf("%w: sha256 %s, expected %s (download again; a mismatch that repeats means the object was replaced)", ErrCorrupt, got, x.o.SHA256)
	}
	if err := x.matchManifest(); err != nil {
		return nil, err
	}
	if x.o.Check != nil {
		if err := x.o.Check(x.manifest); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRejected, err)
		}
	}
	res := &Extracted{Manifest: *x.manifest, Bytes: x.b.used, SHA256: got, Size: cr.n}
	if x.d == nil {
		return res, nil
	}
	if err := x.commit(res); err != nil {
		return nil, err
	}
	return res, nil
}

// streamErr classifies errors from the decoder or tar reader: limits stay ErrTooLarge, our own
// classified errors pass through, everything else is a corrupt (truncated, malformed) stream.
func (x *extraction) streamErr(err error) error {
	for _, known := range []error{ErrTooLarge, ErrUnsafe, ErrCorrupt, ErrRejected, ErrNoSpace} {
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

// isSparse reports GNU sparse entries in any of their forms: the old GNU type 'S' and the PAX
// formats 0.0, 0.1 and 1.0 (GNU.sparse.* records). archive/tar expands them to their logical size
// from a few bytes of map, so a sparse entry is a bomb; warmd's writer never makes one.
func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

func (x *extraction) entry(tr *tar.Reader, hdr *tar.Header) error {
	if isSparse(hdr) {
		return fmt.Errorf("%w: tar entry %d is a sparse file (GNU/PAX sparse headers); bundles hold only plain files", ErrUnsafe, x.n-1)
	}
	name := hdr.Name
	if hdr.Typeflag == tar.TypeDir {
		name = strings.TrimSuffix(name, "/")
	}
	if name == ManifestName && hdr.Typeflag == tar.TypeReg {
		return x.readManifest(tr, hdr)
	}
	p, err := checkName(name)
	if err != nil {
		return fmt.Errorf("%w: tar entry %d: %w", ErrUnsafe, x.n-1, err)
	}
	if strings.HasPrefix(name, ".warmd/") || name == ".warmd" {
		return fmt.Errorf("%w: %s uses the reserved .warmd/ dir", ErrUnsafe, quote(name))
	}
	if _, dup := x.seen[name]; dup {
		return fmt.Errorf("%w: %s appears twice", ErrCorrupt, quote(name))
	}
	typ := map[byte]string{tar.TypeDir: TypeDir, tar.TypeReg: TypeFile, tar.TypeLink: TypeFile, tar.TypeSymlink: TypeSymlink}[hdr.Typeflag]
	if typ == "" {
		return fmt.Errorf("%w: %s has tar type 0x%02x; only files, dirs and in-tree links are allowed", ErrUnsafe, quote(name), hdr.Typeflag)
	}
	var want Entry
	if x.expect != nil {
		var ok bool
		if want, ok = x.expect[name]; !ok || want.Type != typ {
			return fmt.Errorf("%w: entry %s (%s) is not in the bundle's published manifest", ErrCorrupt, quote(name), typ)
		}
	}
	x.seen[name] = typ
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.mkdirs(p); !errors.Is(err, errBlocked) {
			return err
		}
		return nil // the files below it are left out, each reported
	case tar.TypeReg:
		if x.expect != nil && hdr.Size != want.Size {
			return fmt.Errorf("%w: %s holds %d bytes, its published manifest says %d", ErrCorrupt, quote(name), hdr.Size, want.Size)
		}
		return x.file(tr, p, hdr, want.SHA256)
	case tar.TypeSymlink:
		if err := checkLinkTarget(name, hdr.Linkname); err != nil {
			return fmt.Errorf("%w: symlink %s: %w", ErrUnsafe, quote(name), err)
		}
		if x.expect != nil && want.Target != hdr.Linkname {
			return fmt.Errorf("%w: symlink %s does not match its published manifest", ErrCorrupt, quote(name))
		}
		x.links = append(x.links, link{p, hdr.Linkname})
		return nil
	}
	return x.hardlink(p, hdr.Linkname, want)
}

func (x *extraction) readManifest(tr *tar.Reader, hdr *tar.Header) error {
	if hdr.Size < 0 || hdr.Size > maxManifestBytes {
		return fmt.Errorf("%w: manifest of %d bytes (at most %d)", ErrTooLarge, hdr.Size, maxManifestBytes)
	}
	x.lim.left += hdr.Size
	data, err := io.ReadAll(io.LimitReader(tr, hdr.Size))
	if err != nil {
		return err
	}
	m, err := ParseManifest(data)
	if err != nil {
		return err
	}
	x.manifest = m
	return nil
}

// hardlink adds name as a second name of an earlier file of this bundle.
func (x *extraction) hardlink(p fsroot.Path, target string, want Entry) error {
	i, ok := x.byName[target]
	if !ok {
		return fmt.Errorf("%w: hardlink %s does not name an earlier file of this bundle", ErrUnsafe, quote(p.String()))
	}
	src := x.files[i]
	if x.expect != nil && (want.Size != src.size || want.SHA256 != src.sum) {
		return fmt.Errorf("%w: hardlink %s does not match its published manifest", ErrCorrupt, quote(p.String()))
	}
	if x.d != nil && !src.blocked {
		err := x.mkdirs(p.Dir())
		src.blocked = errors.Is(err, errBlocked)
		if err != nil && !src.blocked {
			return err
		}
	}
	if x.d != nil && src.blocked {
		src.tmp = fsroot.Path{}
	} else if x.d != nil {
		tmp, err := tempName(p)
		if err != nil {
			return err
		}
		if err := x.d.link(src.tmp, tmp); err != nil {
			return err
		}
		src.tmp = tmp
	}
	src.final = p
	x.byName[p.String()] = len(x.files)
	x.files = append(x.files, src)
	return nil
}

func (x *extraction) file(tr *tar.Reader, p fsroot.Path, hdr *tar.Header, wantSum string) error {
	name := p.String()
	if hdr.Size < 0 {
		return fmt.Errorf("%w: %s has a negative size", ErrCorrupt, quote(name))
	}
	if err := x.b.admit(name, hdr.Size); err != nil {
		return err
	}
	x.lim.left += hdr.Size
	h := sha256.New()
	var n int64
	var err error
	if x.d == nil {
		n, err = copyBuf(h, tr, x.buf)
		x.files = append(x.files, pending{final: p, size: hdr.Size})
	} else {
		n, err = x.write(tr, p, hdr, h)
	}
	if err != nil {
		return err
	}
	if n != hdr.Size {
		return fmt.Errorf("%w: %s has %d of %d bytes", ErrCorrupt, quote(name), n, hdr.Size)
	}
	f := &x.files[len(x.files)-1]
	f.sum = hex.EncodeToString(h.Sum(nil))
	x.byName[name] = len(x.files) - 1
	if wantSum != "" && f.sum != wantSum {
		return fmt.Errorf("%w: %s does not match the sha256 of its published manifest entry", ErrCorrupt, quote(name))
	}
	return nil
}

// write streams one file into a new temp file beside its final name.
func (x *extraction) write(tr *tar.Reader, p fsroot.Path, hdr *tar.Header, h hash.Hash) (int64, error) {
	if err := x.mkdirs(p.Dir()); errors.Is(err, errBlocked) {
		x.files = append(x.files, pending{final: p, size: hdr.Size, blocked: true})
		return copyBuf(h, tr, x.buf) // verified like the rest, never written
	} else if err != nil {
		return 0, err
	}
	mode := os.FileMode(0o644)
	if hdr.Mode&0o111 != 0 {
		mode = 0o755
	}
	tmp, err := tempName(p)
	if err != nil {
		return 0, err
	}
	f, err := x.d.create(tmp, mode)
	if err != nil {
		return 0, err
	}
	x.files = append(x.files, pending{tmp: tmp, final: p, size: hdr.Size})
	n, err := copyBuf(&spaceWriter{w: io.MultiWriter(f, h), b: &x.b}, tr, x.buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

func (x *extraction) mkdirs(dir fsroot.Path) error {
	if dir.IsRoot() || x.d == nil {
		return nil
	}
	return x.d.mkdir(dir, func(d fsroot.Path) { x.created = append(x.created, d) })
}

// matchManifest holds the bundle's manifest to exactly what the tar stream held: the same files with
// the same sizes and digests (every digest computed here, never taken from the manifest), the same
// dirs and links; and, when the bundle was published with a manifest, to that one.
func (x *extraction) matchManifest() error {
	m := x.manifest
	if x.o.Expect != nil && !bytes.Equal(m.canonical(), x.o.Expect.canonical()) {
		return fmt.Errorf("%w: the bundle's manifest differs from the one published with it", ErrCorrupt)
	}
	if len(m.Entries) != len(x.seen) {
		return fmt.Errorf("%w: manifest lists %d entries, bundle holds %d", ErrCorrupt, len(m.Entries), len(x.seen))
	}
	links := make(map[string]string, len(x.links))
	for _, l := range x.links {
		links[l.path.String()] = l.target
	}
	for i, e := range m.Entries {
		if x.seen[e.Path] != e.Type {
			return fmt.Errorf("%w: manifest entries[%d] (%s %s) is not in the bundle", ErrCorrupt, i, e.Type, quote(e.Path))
		}
		switch e.Type {
		case TypeFile:
			p := x.files[x.byName[e.Path]]
			if e.Size != p.size || e.SHA256 != p.sum {
				return fmt.Errorf("%w: %s does not match its manifest entry (size or sha256)", ErrCorrupt, quote(e.Path))
			}
		case TypeSymlink:
			if links[e.Path] != e.Target {
				return fmt.Errorf("%w: symlink %s does not match its manifest entry", ErrCorrupt, quote(e.Path))
			}
		}
	}
	return nil
}

func (x *extraction) commit(res *Extracted) error {
	if x.o.Sync {
		x.d.syncfs()
	}
	for i := range x.files {
		p := &x.files[i]
		if p.blocked {
			res.Conflicts = append(res.Conflicts, p.final.String())
			continue
		}
		exists, err := x.d.publish(p.tmp, p.final)
		if err != nil {
			return err
		}
		if !exists {
			p.tmp = fsroot.Path{}
			res.Written++
			continue
		}
		if x.d.sameFile(p.final, p.size, p.sum, x.buf) {
			res.Existing++
		} else {
			res.Conflicts = append(res.Conflicts, p.final.String())
		}
		x.d.remove(p.tmp)
		p.tmp = fsroot.Path{}
	}
	for _, l := range x.links {
		exists, same, err := x.d.symlink(l.target, l.path)
		if err != nil {
			return err
		}
		if exists && !same {
			res.Conflicts = append(res.Conflicts, l.path.String())
		} else {
			res.Links++
		}
	}
	x.created = nil // committed: keep the dirs
	return nil
}

// cleanup removes temp files and the dirs this extraction created (when empty).
func (x *extraction) cleanup() {
	if x.d == nil {
		return
	}
	for _, p := range x.files {
		if !p.tmp.IsRoot() {
			x.d.remove(p.tmp)
		}
	}
	for i := len(x.created) - 1; i >= 0; i-- {
		x.d.rmdir(x.created[i])
	}
}

// link is a symlink entry, created after every file is published.
type link struct {
	path   fsroot.Path
	target string
}

// tempName is a fresh temp name beside p: ".<base>.warmd-tmp-<random>", which fsroot.IsTemp and
// IsTemp both recognize (a kill -9 leaves only those, and SweepTemps removes them).
func tempName(p fsroot.Path) (fsroot.Path, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	base := p.Base()
	if len(base) > 200 {
		base = base[:200]
	}
	return p.Dir().Child("." + base + TempMarker + hex.EncodeToString(b[:]))
}

func copyBuf(w io.Writer, r io.Reader, buf []byte) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, buf)
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
