package weights

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
)

// errMismatch marks a file whose bytes do not match its checksum: it is refetched, not fatal.
var errMismatch = errors.New("checksum mismatch")

var (
	md5ETag   = regexp.MustCompile(`^[0-9a-f]{32}$`)
	hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// verifyAll verifies every file not yet verified (the journal remembers verified ones across
// restarts). It returns the files whose bytes mismatched; any other error is fatal.
func (f *fetch) verifyAll(ctx context.Context) (map[int]error, error) {
	manifest, err := f.loadManifest(ctx)
	if err != nil {
		return nil, err
	}
	bad := map[int]error{}
	results := make([]prefetch.FileVerification, len(f.files))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(2, runtime.GOMAXPROCS(0)))
	for i := range f.files {
		sf := f.files[i]
		if v, ok := f.j.verifiedAs(i); ok {
			f.mu.Lock()
			fv, early := f.early[i]
			f.mu.Unlock()
			if !early {
				fv = prefetch.FileVerification{Name: sf.obj.Key, Size: sf.obj.Size, Method: v.method, Digest: strings.TrimPrefix(v.digest, "-")}
			}
			results[i] = fv
			continue
		}
		g.Go(func() error {
			fv, err := f.verifyFile(gctx, i, manifest)
			if errors.Is(err, errMismatch) {
				mu.Lock()
				bad[i] = err
				mu.Unlock()
				return nil
			}
			if err != nil {
				return fmt.Errorf("verify %s: %w", sf.obj.Key, err)
			}
			results[i] = fv
			if err := f.j.markVerified(i, fv.Method, fv.Digest); err != nil {
				return err
			}
			f.stage(i)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.status.Files = results
	f.mu.Unlock()
	return bad, nil
}

// maxManifest bounds a sha256 manifest: a million files' lines stay under it.
const maxManifest = 16 << 20

// manifestEntry is one file's digest in the sha256 manifest and the line it was on.
type manifestEntry struct {
	sum  string
	line int
}

// loadManifest reads the model's sha256sum-format manifest, if the config names one. Its content
// is outside input (and a file:// manifest may be a link to anything): errors name the manifest and
// a line number, never a byte of what is in it.
func (f *fetch) loadManifest(ctx context.Context) (map[string]manifestEntry, error) {
	if f.m.SHA256Manifest == "" {
		return nil, nil
	}
	name, err := fsroot.ParsePath(f.m.SHA256Manifest)
	if err != nil {
		return nil, fmt.Errorf("sha256Manifest: %w (name a file under the source)", err)
	}
	q := fsroot.Quote(name.String())
	o, err := f.src.Head(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("sha256 manifest %s: %w (fix sha256Manifest or upload the manifest)", q, err)
	}
	if o.Size > maxManifest {
		return nil, fmt.Errorf("sha256 manifest %s is %d bytes; a manifest over %d MiB is not a sha256sum list", q, o.Size, maxManifest>>20)
	}
	var b bytes.Buffer
	if _, err := f.src.GetRange(ctx, name, 0, o.Size, &b); err != nil {
		return nil, fmt.Errorf("read sha256 manifest %s: %w", q, err)
	}
	out := map[string]manifestEntry{}
	sc := bufio.NewScanner(&b)
	sc.Buffer(make([]byte, 64<<10), maxManifest)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, file, ok := strings.Cut(line, " ")
		file = strings.TrimPrefix(strings.TrimLeft(file, " "), "*")
		file = strings.TrimPrefix(file, "./")
		sum = strings.ToLower(sum)
		if !ok || !hexDigest.MatchString(sum) || file == "" {
			return nil, fmt.Errorf("sha256 manifest %s line %d is not a \"<64 hex digits>  <file>\" line (write the manifest with sha256sum; its content is not shown here)", q, n)
		}
		out[file] = manifestEntry{sum: sum, line: n}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sha256 manifest %s after line %d: %w (its content is not shown here)", q, n, err)
	}
	return out, nil
}

// verifyFile checks one staged file with the strongest evidence available: the store's checksum
// (full-object, or composite part by part), the sha256 manifest, a single-part ETag, else its size.
func (f *fetch) verifyFile(ctx context.Context, i int, manifest map[string]manifestEntry) (prefetch.FileVerification, error) {
	sf := f.files[i]
	fv := prefetch.FileVerification{Name: sf.obj.Key, Size: sf.obj.Size, Method: prefetch.VerifiedSize}
	fi, err := sf.fh.Stat()
	if err != nil {
		return fv, err
	}
	if fi.Size() != sf.obj.Size {
		return fv, fmt.Errorf("%w: staged %d bytes, want %d", errMismatch, fi.Size(), sf.obj.Size)
	}
	head, err := f.src.Head(ctx, sf.name)
	if err != nil {
		return fv, err
	}
	if head.Size != sf.obj.Size || (head.ETag != "" && sf.obj.ETag != "" && head.ETag != sf.obj.ETag) {
		return fv, fmt.Errorf("%s changed during the download (size %d→%d, ETag %s→%s); the next attempt fetches the new version",
			sf.obj.Key, sf.obj.Size, head.Size, fsroot.Quote(sf.obj.ETag), fsroot.Quote(head.ETag))
	}
	if cs := head.Checksum; cs.Value != "" {
		if !cs.Composite {
			got, streamed := f.streamedSum(i)
			if !streamed || cs.Algorithm != sf.streamAlg {
				if got, err = hashFile(sf.fh, 0, sf.obj.Size, cs.Algorithm); err != nil {
					return fv, err
				}
			}
			if objstore.Encode(got) != cs.Value {
				return fv, fmt.Errorf("%w: %s %s, store says %s", errMismatch, fsroot.Quote(cs.Algorithm), objstore.Encode(got), fsroot.Quote(cs.Value))
			}
			fv.Method, fv.Digest, fv.Streamed = prefetch.VerifiedChecksum, cs.Algorithm+":"+cs.Value, streamed && cs.Algorithm == sf.streamAlg
			return fv, nil
		}
		ok, err := f.verifyComposite(ctx, sf, cs)
		if err != nil {
			return fv, err
		}
		if ok {
			fv.Method, fv.Digest = prefetch.VerifiedComposite, cs.Algorithm+":"+cs.Value
			return fv, nil
		}
	}
	if want, ok := manifest[sf.obj.Key]; ok {
		got, err := hashFile(sf.fh, 0, sf.obj.Size, "sha256")
		if err != nil {
			return fv, err
		}
		if hex.EncodeToString(got) != want.sum {
			return fv, fmt.Errorf("%w: sha256 %x differs from line %d of the sha256 manifest", errMismatch, got, want.line)
		}
		fv.Method, fv.Digest = prefetch.VerifiedManifest, "sha256:"+want.sum
		return fv, nil
	}
	if etag := strings.ToLower(head.ETag); md5ETag.MatchString(etag) {
		got, err := hashFile(sf.fh, 0, sf.obj.Size, "md5")
		if err != nil {
			return fv, err
		}
		if hex.EncodeToString(got) != etag {
			return fv, fmt.Errorf("%w: md5 %x, ETag says %s", errMismatch, got, etag)
		}
		fv.Method, fv.Digest = prefetch.VerifiedETag, "md5:"+etag
		return fv, nil
	}
	return fv, nil
}

// verifyComposite recomputes a multipart object's composite checksum from the local bytes and the
// part boundaries (checking each part's own checksum too when the store lists it). ok is false when the store does not give
// the parts (the caller falls back to weaker checks).
func (f *fetch) verifyComposite(ctx context.Context, sf stagedFile, cs objstore.Checksum) (bool, error) {
	var parts []objstore.Part
	var err error
	if sf.pieces != nil {
		parts = sf.pieces.parts // asked for at the start (pieces.go)
	} else {
		parts, err = f.src.Parts(ctx, sf.name)
	}
	if err != nil || len(parts) == 0 {
		f.e.opts.Log.Debug("composite checksum without part list; using weaker verification", "file", sf.obj.Key, "err", err)
		return false, nil
	}
	var off int64
	var sums [][]byte
	for k, p := range parts {
		got := sf.pieces.verifiedSum(k)
		if got == nil {
			if got, err = hashFile(sf.fh, off, p.Size, cs.Algorithm); err != nil {
				return false, err
			}
		}
		// Part checksums, when the store gives them, name the bad part; the composite below is
		// checked either way (it needs only the part boundaries).
		if p.Checksum != "" && objstore.Encode(got) != p.Checksum {
			return false, fmt.Errorf("%w: part %d (bytes %d-%d) %s %s, store says %s", errMismatch, p.Number, off, off+p.Size-1, fsroot.Quote(cs.Algorithm), objstore.Encode(got), fsroot.Quote(p.Checksum))
		}
		sums = append(sums, got)
		off += p.Size
	}
	if off != sf.obj.Size {
		return false, fmt.Errorf("%w: parts cover %d bytes of %d", errMismatch, off, sf.obj.Size)
	}
	want, err := objstore.CompositeChecksum(cs.Algorithm, sums)
	if err != nil {
		return false, err
	}
	if base, _, _ := strings.Cut(want, "-"); base != strings.SplitN(cs.Value, "-", 2)[0] {
		return false, fmt.Errorf("%w: composite %s %s, store says %s", errMismatch, fsroot.Quote(cs.Algorithm), want, fsroot.Quote(cs.Value))
	}
	return true, nil
}

func hashFile(fh *os.File, off, n int64, alg string) ([]byte, error) {
	var h hash.Hash
	switch alg {
	case "md5":
		h = md5.New()
	case "sha256":
		h = sha256.New()
	default:
		var err error
		if h, err = objstore.NewHash(alg); err != nil {
			return nil, err
		}
	}
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(h, io.NewSectionReader(fh, off, n), buf); err != nil {
		return nil, fmt.Errorf("read back %s: %w", fh.Name(), err)
	}
	return h.Sum(nil), nil
}
