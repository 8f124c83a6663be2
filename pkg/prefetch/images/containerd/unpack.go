package containerd

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/klauspost/compress/zstd"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"warmd.io/warmd/pkg/inflate"
	"warmd.io/warmd/pkg/prefetch"
)

// PathWarmd is the path on which warmd unpacks layers itself: the daemon fetches each blob into its
// content store (its HTTP client, hosts.toml, credentials from warmd's callback), and warmd inflates
// the blob with its own decoder (pkg/inflate; gzip layers with a checkpoint index decode on every
// core) and untars it in-process with containerd's own archive.Apply, straight into the snapshot's
// directory, with the same options the daemon's applier uses (overlay whiteouts, parents for opaque
// directories). The snapshots are then committed as on the parallel path. What a pod sees is the same
// tree, the same snapshot names and the same GC labels as after the daemon's own unpack.
//
// It needs to see the daemon's content and snapshot directories at the paths the daemon reports
// (a hostPath of the containerd root in the pod, as the chart mounts it) and the privileges the
// daemon's applier uses (mknod for whiteouts, trusted.* xattrs for opaque directories, chown); where
// any is missing New says which and the backend uses the daemon's unpack instead.
const PathWarmd = "warmd"

// MaxIndexBytes bounds one stored index, wherever it comes from (an index of a 100 GiB layer at the
// default span is ~64 MiB before compression; windows of real layers compress several-fold).
const MaxIndexBytes = 128 << 20

// IndexStore keeps gzip checkpoint indexes by the compressed layer's digest, so a layer inflated once
// decodes on every core the next time, here or (through a shared store) on other nodes. An index is
// hostile input: it is validated before use and its output is always checked against the diff ID.
type IndexStore interface {
	Get(ctx context.Context, layer digest.Digest) ([]byte, error)
	Put(ctx context.Context, layer digest.Digest, index []byte) error
	Remove(ctx context.Context, layer digest.Digest) error
}

// roots are the daemon's directories warmd reads blobs from and writes snapshots into.
type roots struct{ content, snapshots string }

// findRoots asks the daemon where its content store and snapshotter keep their files, and checks
// that this process sees them and may write snapshots; the error says what is missing.
func findRoots(ctx context.Context, c *client.Client, snapshotter string) (roots, error) {
	var r roots
	resp, err := c.IntrospectionService().Plugins(ctx)
	if err != nil {
		return r, fmt.Errorf("introspection: %w", err)
	}
	for _, p := range resp.Plugins {
		switch {
		case p.Type == "io.containerd.content.v1" && p.ID == "content":
			r.content = p.Exports["root"]
		case p.Type == "io.containerd.snapshotter.v1" && p.ID == snapshotter:
			r.snapshots = p.Exports["root"]
		}
	}
	if r.content == "" || r.snapshots == "" {
		return r, fmt.Errorf("the daemon does not report its content and %s snapshotter roots", snapshotter)
	}
	if _, err := os.Stat(r.content); err != nil {
		return r, fmt.Errorf("content store %s is not visible here (mount the containerd root into warmd's pod at the same path): %w", r.content, err)
	}
	if err := unix.Access(r.snapshots, unix.W_OK); err != nil {
		return r, fmt.Errorf("snapshotter root %s is not writable here (mount the containerd root read-write at the same path): %w", r.snapshots, err)
	}
	return r, nil
}

// LayerStats says how one layer was unpacked, for logs and status.
type LayerStats struct {
	Decoder        string  // gzip-warmd, gzip-warmd-indexed, zstd, none
	Compressed     int64   // bytes read
	Inflated       int64   // bytes of tar
	Seconds        float64 // from open to applied and checked
	IndexBuilt     bool
	IndexDiscarded string // why an index was not used, when one was found

	implicit *implicitDirs // recorded when the layer was applied without its parents
}

// report is st as the layer's status shows it.
func (st LayerStats) report() prefetch.LayerUnpack {
	u := prefetch.LayerUnpack{By: "warmd", Decoder: st.Decoder, Inflated: st.Inflated, Seconds: st.Seconds}
	switch {
	case st.IndexDiscarded != "":
		u.Index = "discarded"
	case st.Decoder == "gzip-warmd-indexed":
		u.Index = "used"
	case st.IndexBuilt:
		u.Index = "built"
	}
	return u
}

// applyOwn inflates layer desc and untars it onto mounts, checking the stream against diffID. It
// returns errUnsupported when the mounts are of a kind warmd does not write (the caller has the daemon
// apply that layer instead). With record, the implicit parent directories the apply creates are kept
// in the stats (a layer applied without its parents, see implicitDirs).
func (b *Backend) applyOwn(ctx context.Context, desc ocispec.Descriptor, diffID digest.Digest, mounts []mount.Mount, useIndex, record bool) (LayerStats, error) {
	t0 := time.Now()
	dir, opts, err := applyTarget(mounts)
	if err != nil {
		return LayerStats{}, err
	}
	blob, err := os.Open(filepath.Join(b.roots.content, "blobs", desc.Digest.Algorithm().String(), desc.Digest.Encoded()))
	if err != nil {
		return LayerStats{}, fmt.Errorf("open layer blob %s: %w", desc.Digest, err)
	}
	defer blob.Close()
	if st, err := blob.Stat(); err != nil || st.Size() != desc.Size {
		return LayerStats{}, fmt.Errorf("layer blob %s is not %d bytes in the content store", desc.Digest, desc.Size)
	}
	st := LayerStats{Compressed: desc.Size}
	if record {
		st.implicit = newImplicitDirs(dir)
		opts = append(opts, archive.WithFilter(st.implicit.filter))
	}
	var src io.Reader
	var decoded chan error
	var cp *chunkPipe
	switch mediaKind(desc.MediaType) {
	case "gzip":
		// The decoder runs ahead of the untar by a few chunks (a chunkPipe, not io.Pipe, whose writer
		// waits for every byte to be read), so inflating and writing files overlap.
		st.Decoder = "gzip-warmd"
		cp = newChunkPipe(6)
		decoded = make(chan error, 1)
		go func() {
			err := b.inflateGzip(ctx, desc, blob, cp.send, useIndex, &st)
			cp.close(err)
			decoded <- err
		}()
		defer cp.drain()
		src = cp
	case "zstd":
		st.Decoder = "zstd"
		zr, err := zstd.NewReader(blob, zstd.WithDecoderMaxWindow(1<<30), zstd.WithDecoderMaxMemory(uint64(maxInflate(desc.Size))))
		if err != nil {
			return st, err
		}
		defer zr.Close()
		src = zr
	case "tar":
		st.Decoder = "none"
		src = blob
	default:
		return st, fmt.Errorf("%w: media type %q", errUnsupported, desc.MediaType)
	}
	h := sha256.New()
	cr := &countReader{r: io.TeeReader(src, h)}
	_, aerr := archive.Apply(ctx, dir, cr, opts...)
	if aerr == nil {
		_, aerr = io.Copy(io.Discard, cr) // the digest covers what follows the tar's end too, as the daemon's
	}
	var derr error
	if decoded != nil {
		if aerr != nil {
			cp.drain()
		}
		derr = <-decoded
	} else {
		st.Inflated = cr.n
	}
	st.Seconds = time.Since(t0).Seconds()
	if derr != nil {
		return st, fmt.Errorf("inflate layer %s: %w", desc.Digest, derr)
	}
	if aerr != nil {
		return st, fmt.Errorf("untar layer %s: %w", desc.Digest, aerr)
	}
	if got := digest.NewDigest(digest.SHA256, h); got != diffID {
		return st, fmt.Errorf("%w: layer %s unpacks to %s, config says %s", errDiffID, desc.Digest, got, diffID)
	}
	return st, nil
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

var (
	errDiffID      = errors.New("diff ID mismatch")
	errUnsupported = errors.New("mounts warmd does not write")
)

// applyTarget mirrors the daemon's applier (core/diff/apply): an overlay mount with an upper dir is
// written directly with overlay whiteouts and its lower dirs as parents; a bind mount is its source.
func applyTarget(mounts []mount.Mount) (string, []archive.ApplyOpt, error) {
	if len(mounts) != 1 {
		return "", nil, fmt.Errorf("%w: %d mounts", errUnsupported, len(mounts))
	}
	m := mounts[0]
	switch m.Type {
	case "bind":
		return m.Source, nil, nil
	case "overlay":
		var upper string
		var lower []string
		for _, o := range m.Options {
			if v, ok := strings.CutPrefix(o, "upperdir="); ok {
				upper = v
			} else if v, ok := strings.CutPrefix(o, "lowerdir="); ok {
				lower = strings.Split(v, ":")
			}
		}
		if upper == "" {
			return "", nil, fmt.Errorf("%w: overlay without an upper dir", errUnsupported)
		}
		opts := []archive.ApplyOpt{archive.WithConvertWhiteout(archive.OverlayConvertWhiteout)}
		if len(lower) > 0 {
			opts = append(opts, archive.WithParents(lower))
		}
		return upper, opts, nil
	}
	return "", nil, fmt.Errorf("%w: a %s mount", errUnsupported, m.Type)
}

// mediaKind says how a layer is compressed.
func mediaKind(mt string) string {
	switch {
	case strings.HasSuffix(mt, "gzip"):
		return "gzip"
	case strings.HasSuffix(mt, "zstd"):
		return "zstd"
	case mt == ocispec.MediaTypeImageLayer || mt == images.MediaTypeDockerSchema2Layer:
		return "tar"
	}
	return ""
}

// maxInflate bounds a layer's tar: no real layer inflates more than 100x, and a bomb stops there.
func maxInflate(compressed int64) int64 { return max(1<<30, 100*compressed) }

// inflateGzip writes the tar of a gzip layer to w: on every core from the index when one is stored
// and checks out, else serially, recording an index for the next time.
func (b *Backend) inflateGzip(ctx context.Context, desc ocispec.Descriptor, blob *os.File, emit func(*inflate.Chunk) error, useIndex bool, st *LayerStats) error {
	limit := maxInflate(desc.Size)
	if useIndex && b.opts.Indexes != nil {
		if p, err := b.opts.Indexes.Get(ctx, desc.Digest); err == nil && p != nil {
			idx, err := inflate.UnmarshalIndex(p, desc.Size)
			if err == nil {
				st.Decoder = "gzip-warmd-indexed"
				res, err := inflate.DecodeIndexed(ctx, blob, idx, emit, inflate.Options{MaxOutput: limit})
				st.Inflated = res.Out
				if err != nil {
					return fmt.Errorf("%w: %w", errIndexed, err)
				}
				return nil
			}
			st.IndexDiscarded = err.Error()
		}
	}
	res, err := inflate.Decode(ctx, blob, emit, inflate.Options{Span: inflate.DefaultSpan, MaxOutput: limit, InputSize: desc.Size})
	st.Inflated = res.Out
	if err != nil {
		return err
	}
	if b.opts.Indexes != nil && res.Index != nil && len(res.Index.Points) > 0 {
		if p, err := res.Index.MarshalBinary(); err == nil {
			if err := b.opts.Indexes.Put(ctx, desc.Digest, p); err != nil {
				b.opts.Log.Warn("could not keep the layer's gzip index", "layer", desc.Digest, "err", err)
			} else {
				st.IndexBuilt = true
			}
		}
	}
	return nil
}

// errIndexed marks a failure of an indexed decode: the caller drops the index and decodes serially.
var errIndexed = errors.New("indexed decode failed")

// unpackStats adds up how the layers of this backend's pulls were unpacked (for the log line at the
// end of a pull, tests and the benchmark).
type unpackStats struct {
	mu  sync.Mutex
	sum UnpackSummary
}

// UnpackSummary counts layers by decoder and the bytes warmd inflated itself.
type UnpackSummary struct {
	Layers, Indexed, IndexesBuilt, IndexesDiscarded int
	Compressed, Inflated                            int64
}

func (u *unpackStats) add(st LayerStats) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.sum.Layers++
	u.sum.Compressed += st.Compressed
	u.sum.Inflated += st.Inflated
	if st.Decoder == "gzip-warmd-indexed" {
		u.sum.Indexed++
	}
	if st.IndexBuilt {
		u.sum.IndexesBuilt++
	}
	if st.IndexDiscarded != "" {
		u.sum.IndexesDiscarded++
	}
}

// Unpacked is what warmd's own unpacker has done since the backend was made.
func (b *Backend) Unpacked() UnpackSummary {
	b.stats.mu.Lock()
	defer b.stats.mu.Unlock()
	return b.stats.sum
}
