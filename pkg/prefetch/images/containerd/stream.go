package containerd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	kgzip "github.com/klauspost/compress/gzip"
	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/oci"
)

// The stream path (containerd 2.x whose snapshotter can rebase) does what the daemon's Transfer
// service does, with the work spread differently so a multi-GB gzip layer stops being one long
// serial chain of fetch, then gunzip, then untar on one daemon thread:
//
//   - every layer is fetched at once, straight from the registry through the configured resolver
//     (hosts.toml mirrors and credentials apply), into the daemon's content store (the daemon
//     verifies the compressed digest at commit);
//   - while the bytes arrive, warmd gunzips them (klauspost, faster than the daemon's stdlib
//     inflate) and checks the uncompressed digest against the config's diff ID itself;
//   - the uncompressed tar goes to the daemon in chunks cut at entry boundaries, each a temporary
//     blob under the pull's lease that the diff service applies to the layer's snapshot and warmd
//     deletes right after, so the daemon untars chunk k while warmd gunzips chunk k+1;
//   - each layer is unpacked into its own parentless snapshot in parallel with the others and the
//     chain is rebased into place at commit, in order (the snapshotter's "rebase" capability, as
//     containerd's own unpacker does when max_concurrent_unpacks > 1).
//
// What a pod sees is the same: the image record, its content with the GC labels the daemon's
// unpacker sets, and committed snapshots named by chain ID.

// PathStream is the stream API path.
const PathStream = "stream"

// writeBlock is the size of one content write: each is a gRPC round trip to the daemon, so they
// are made big (the daemon accepts messages up to 16 MiB).
const writeBlock = 4 << 20

// streamChunk is how much uncompressed tar warmd hands the daemon per Apply.
const streamChunk = 128 << 20

// hasRebase says whether the snapshotter can unpack layers in parallel and rebase them at commit.
func hasRebase(ctx context.Context, c *client.Client, snapshotter string) bool {
	caps, err := c.GetSnapshotterCapabilities(ctx, snapshotter)
	if err != nil {
		return false
	}
	for _, c := range caps {
		if c == snapshots.RebaseCap {
			return true
		}
	}
	return false
}

// pullStream pulls r as described above.
func (b *Backend) pullStream(ctx context.Context, r prefetch.Resolved, progress func(prefetch.Progress)) error {
	pr, err := oci.ParseRef(r.Name)
	if err != nil {
		return err
	}
	ctx, done, err := b.client.WithLease(ctx)
	if err != nil {
		return fmt.Errorf("lease for %s: %w", r.Name, err)
	}
	defer done(context.WithoutCancel(ctx))
	res := b.opts.Registry.Resolver(ctx, pr.Host)
	fetcher, err := res.Fetcher(ctx, r.Name)
	if err != nil {
		return fmt.Errorf("fetcher for %s: %w", r.Name, err)
	}
	cs := b.client.ContentStore()
	manifest, config, err := b.fetchMeta(ctx, r, fetcher)
	if err != nil {
		return err
	}
	layers := manifest.Layers
	diffIDs, err := readDiffIDs(ctx, cs, config)
	if err != nil {
		return err
	}
	if len(diffIDs) != len(layers) {
		return fmt.Errorf("%s: config lists %d diff IDs for %d layers", r.Name, len(diffIDs), len(layers))
	}
	chain := identity.ChainIDs(append([]digest.Digest(nil), diffIDs...)) // ChainIDs works in place
	tr := oci.NewTracker(r, progress)
	sn := b.client.SnapshotService(b.opts.Snapshotter)
	distSrc, err := docker.AppendDistributionSourceLabel(cs, r.Name)
	if err != nil {
		return err
	}

	// Layers whose chain already exists are done (as in containerd's unpacker); the lowest missing
	// one and everything above it are unpacked.
	first := len(layers)
	for i := len(layers) - 1; i >= 0; i-- {
		if _, err := sn.Stat(ctx, chain[i].String()); err == nil {
			break
		}
		first = i
	}
	for i := range first {
		tr.Set(layers[i].Digest, layers[i].Size, true)
	}
	keys := make([]string, len(layers))
	g, gctx := errgroup.WithContext(ctx)
	for i := first; i < len(layers); i++ {
		g.Go(func() error {
			key, err := b.unpackLayer(gctx, r, fetcher, layers[i], diffIDs[i], chain, i, tr)
			keys[i] = key
			if err == nil {
				_, err = distSrc(gctx, layers[i])
			}
			return err
		})
	}
	err = g.Wait()
	if err == nil {
		err = b.commitChain(ctx, sn, layers, diffIDs, chain, keys, first)
	}
	for _, k := range keys {
		if k != "" {
			_ = sn.Remove(context.WithoutCancel(ctx), k) // committed ones are gone already
		}
	}
	if err != nil {
		return fmt.Errorf("pull %s: %w", r.Name, err)
	}
	if len(chain) > 0 {
		key := "containerd.io/gc.ref.snapshot." + b.opts.Snapshotter
		if _, err := cs.Update(ctx, content.Info{Digest: config.Digest, Labels: map[string]string{key: chain[len(chain)-1].String()}}, "labels."+key); err != nil {
			return fmt.Errorf("label config of %s: %w", r.Name, err)
		}
	}
	return b.putImage(ctx, r)
}

// fetchMeta stores the index (if any), the platform's manifest and the config with the children
// labels that keep layers and config alive, and returns the parsed manifest and the config.
func (b *Backend) fetchMeta(ctx context.Context, r prefetch.Resolved, fetcher remotes.Fetcher) (ocispec.Manifest, ocispec.Descriptor, error) {
	cs := b.client.ContentStore()
	match := platforms.Only(b.platformOf())
	distSrc, err := docker.AppendDistributionSourceLabel(cs, r.Name)
	if err != nil {
		return ocispec.Manifest{}, ocispec.Descriptor{}, err
	}
	fetch := remotes.FetchHandler(cs, fetcher)
	h := images.Handlers(
		images.HandlerFunc(func(ctx context.Context, d ocispec.Descriptor) ([]ocispec.Descriptor, error) {
			if images.IsLayerType(d.MediaType) {
				return nil, images.ErrSkipDesc
			}
			return fetch(ctx, d)
		}),
		images.SetChildrenMappedLabels(cs, images.LimitManifests(images.FilterPlatforms(images.ChildrenHandler(cs), match), match, 1), nil),
		distSrc,
	)
	if err := images.Dispatch(ctx, h, nil, r.Target); err != nil {
		return ocispec.Manifest{}, ocispec.Descriptor{}, fmt.Errorf("fetch manifest of %s: %w", r.Name, err)
	}
	m, err := images.Manifest(ctx, cs, r.Target, match)
	if err != nil {
		return ocispec.Manifest{}, ocispec.Descriptor{}, fmt.Errorf("read manifest of %s: %w", r.Name, err)
	}
	return m, m.Config, nil
}

func readDiffIDs(ctx context.Context, cs content.Store, config ocispec.Descriptor) ([]digest.Digest, error) {
	p, err := content.ReadBlob(ctx, cs, config)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", config.Digest, err)
	}
	var img ocispec.Image
	if err := json.Unmarshal(p, &img); err != nil {
		return nil, fmt.Errorf("parse config %s: %w", config.Digest, err)
	}
	return img.RootFS.DiffIDs, nil
}

// snapshotLabels are the labels containerd's unpacker gives a layer's snapshot.
func snapshotLabels(desc ocispec.Descriptor, diffID digest.Digest, chain []digest.Digest, i int) map[string]string {
	l := snapshots.FilterInheritedLabels(desc.Annotations)
	if l == nil {
		l = map[string]string{}
	}
	l[snapshots.LabelSnapshotRef] = chain[i].String()
	l[snapshots.LabelSnapshotDiffID] = diffID.String()
	if i > 0 {
		l["containerd.io/snapshot.parent"] = chain[i-1].String()
	}
	return l
}

// commitChain commits the layers' snapshots bottom-up, rebasing each onto its parent chain.
func (b *Backend) commitChain(ctx context.Context, sn snapshots.Snapshotter, layers []ocispec.Descriptor, diffIDs, chain []digest.Digest, keys []string, first int) error {
	for i := first; i < len(layers); i++ {
		opts := []snapshots.Opt{snapshots.WithLabels(snapshotLabels(layers[i], diffIDs[i], chain, i))}
		if i > 0 {
			opts = append(opts, snapshots.WithParent(chain[i-1].String()))
		}
		if err := sn.Commit(ctx, chain[i].String(), keys[i], opts...); err != nil && !errdefs.IsAlreadyExists(err) {
			return fmt.Errorf("commit layer %d (%s): %w", i, layers[i].Digest, err)
		}
		keys[i] = ""
	}
	return nil
}

// putImage creates or updates the image record to point at r.Target, with warmd's labels.
func (b *Backend) putImage(ctx context.Context, r prefetch.Resolved) error {
	is := b.client.ImageService()
	img := images.Image{Name: r.Name, Target: r.Target, Labels: pullLabels()}
	if _, err := is.Create(ctx, img); err != nil {
		if !errdefs.IsAlreadyExists(err) {
			return fmt.Errorf("create image %s: %w", r.Name, err)
		}
		if _, err := is.Update(ctx, img, "target", "labels."+prefetch.LabelPinned, "labels."+prefetch.LabelManaged); err != nil {
			return fmt.Errorf("update image %s: %w", r.Name, err)
		}
	}
	return nil
}

// unpackLayer prepares layer i's snapshot (parentless: the chain is rebased at commit), fetches the
// layer into the content store and applies it, and returns the snapshot's key.
func (b *Backend) unpackLayer(ctx context.Context, r prefetch.Resolved, fetcher remotes.Fetcher, desc ocispec.Descriptor,
	diffID digest.Digest, chain []digest.Digest, i int, tr *oci.Tracker) (string, error) {
	sn := b.client.SnapshotService(b.opts.Snapshotter)
	key := fmt.Sprintf(snapshots.UnpackKeyFormat, strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strconv.Itoa(i), chain[i])
	mounts, err := sn.Prepare(ctx, key, "", snapshots.WithLabels(snapshotLabels(desc, diffID, chain, i)))
	if err != nil {
		return "", fmt.Errorf("prepare snapshot for layer %d (%s): %w", i, desc.Digest, err)
	}
	if i > 0 {
		mounts = bindToOverlay(mounts) // so the applier converts whiteouts for overlay, as containerd's unpacker does
	}
	cs := b.client.ContentStore()
	gz := desc.MediaType == ocispec.MediaTypeImageLayerGzip || desc.MediaType == images.MediaTypeDockerSchema2LayerGzip
	gz = gz && os.Getenv("WARMD_EXP_DAEMON_GUNZIP") == ""
	_, statErr := cs.Info(ctx, desc.Digest)
	have := statErr == nil
	if !gz {
		// Uncompressed or zstd: the daemon applies the blob itself once it is in.
		t0 := time.Now()
		if !have {
			if err := b.fetchBlob(ctx, fetcher, desc, tr); err != nil {
				return key, err
			}
		}
		t1 := time.Now()
		tr.Set(desc.Digest, desc.Size, true)
		got, err := b.client.DiffService().Apply(ctx, desc, mounts)
		b.opts.Log.Debug("layer applied", "layer", i, "bytes", desc.Size, "fetch_seconds", t1.Sub(t0).Seconds(), "apply_seconds", time.Since(t1).Seconds())
		if err != nil {
			return key, fmt.Errorf("apply layer %d (%s): %w", i, desc.Digest, err)
		}
		if got.Digest != diffID {
			return key, fmt.Errorf("layer %d (%s) unpacks to %s, config says %s", i, desc.Digest, got.Digest, diffID)
		}
		return key, b.labelUncompressed(ctx, desc, diffID)
	}

	var src io.Reader
	var commit func() error
	if have {
		ra, err := cs.ReaderAt(ctx, desc)
		if err != nil {
			return key, fmt.Errorf("read layer %s: %w", desc.Digest, err)
		}
		defer ra.Close()
		src = content.NewReader(ra)
		commit = func() error { return nil }
	} else {
		rc, w, err := b.openFetch(ctx, fetcher, desc)
		if err != nil {
			return key, err
		}
		defer rc.Close()
		defer w.Close()
		aw := newAsyncWriter(w, writeBlock, 4)
		closed := false
		defer func() {
			if !closed {
				_ = aw.Close()
			}
		}()
		src = io.TeeReader(rc, aw)
		commit = func() error {
			closed = true
			if err := aw.Close(); err != nil {
				return fmt.Errorf("write layer %s: %w", desc.Digest, err)
			}
			if err := w.Commit(ctx, desc.Size, desc.Digest); err != nil && !errdefs.IsAlreadyExists(err) {
				return fmt.Errorf("commit layer %s: %w", desc.Digest, err)
			}
			return nil
		}
	}
	cr := &countReader{r: src, fn: func(n int64) { tr.Set(desc.Digest, n, false) }}
	t0 := time.Now()
	if err := b.streamApply(ctx, cr, desc, diffID, mounts, i); err != nil {
		return key, err
	}
	b.opts.Log.Debug("layer unpacked", "layer", i, "bytes", desc.Size, "seconds", time.Since(t0).Seconds())
	if cr.n != desc.Size {
		return key, fmt.Errorf("layer %d (%s): read %d bytes, manifest says %d", i, desc.Digest, cr.n, desc.Size)
	}
	if err := commit(); err != nil {
		return key, err
	}
	tr.Set(desc.Digest, desc.Size, true)
	return key, b.labelUncompressed(ctx, desc, diffID)
}

// openFetch opens the registry stream and a content writer for desc, starting over if an earlier
// attempt left a partial ingest.
func (b *Backend) openFetch(ctx context.Context, fetcher remotes.Fetcher, desc ocispec.Descriptor) (io.ReadCloser, content.Writer, error) {
	w, err := content.OpenWriter(ctx, b.client.ContentStore(), content.WithRef("warmd-layer-"+desc.Digest.String()), content.WithDescriptor(desc))
	if err != nil {
		return nil, nil, fmt.Errorf("open writer for %s: %w", desc.Digest, err)
	}
	if st, err := w.Status(); err == nil && st.Offset > 0 {
		if err := w.Truncate(0); err != nil {
			w.Close()
			return nil, nil, fmt.Errorf("reset partial ingest of %s: %w", desc.Digest, err)
		}
	}
	rc, err := fetcher.Fetch(ctx, desc)
	if err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("fetch %s: %w", desc.Digest, err)
	}
	return rc, w, nil
}

// fetchBlob copies desc into the content store.
func (b *Backend) fetchBlob(ctx context.Context, fetcher remotes.Fetcher, desc ocispec.Descriptor, tr *oci.Tracker) error {
	rc, w, err := b.openFetch(ctx, fetcher, desc)
	if err != nil {
		return err
	}
	defer rc.Close()
	defer w.Close()
	cr := &countReader{r: rc, fn: func(n int64) { tr.Set(desc.Digest, n, false) }}
	aw := newAsyncWriter(w, writeBlock, 4)
	_, err = io.Copy(aw, cr)
	if cerr := aw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fetch %s: %w", desc.Digest, err)
	}
	if err := w.Commit(ctx, desc.Size, desc.Digest); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("commit %s: %w", desc.Digest, err)
	}
	return nil
}

// labelUncompressed records the verified diff ID on the layer blob, as containerd's unpacker does.
func (b *Backend) labelUncompressed(ctx context.Context, desc ocispec.Descriptor, diffID digest.Digest) error {
	info := content.Info{Digest: desc.Digest, Labels: map[string]string{labels.LabelUncompressed: diffID.String()}}
	if _, err := b.client.ContentStore().Update(ctx, info, "labels."+labels.LabelUncompressed); err != nil {
		return fmt.Errorf("label layer %s: %w", desc.Digest, err)
	}
	return nil
}

// streamApply gunzips src, checks the diff ID, and has the daemon apply the tar in chunks cut at
// entry boundaries while the next chunk is being decompressed.
func (b *Backend) streamApply(ctx context.Context, src io.Reader, desc ocispec.Descriptor, diffID digest.Digest, mounts []mount.Mount, i int) error {
	zr, err := kgzip.NewReader(src)
	if err != nil {
		return fmt.Errorf("layer %d (%s): %w", i, desc.Digest, err)
	}
	defer zr.Close()
	dg := diffID.Algorithm().Digester()
	applyQ := make(chan *chunk, 1)
	var applyErr error
	var wg sync.WaitGroup
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() {
		for c := range applyQ {
			if applyErr == nil {
				if applyErr = b.applyChunk(ctx, c, mounts, i); applyErr != nil {
					cancel() // stop decompressing
				}
			} else {
				c.abort()
			}
		}
	})
	err = b.cutChunks(cctx, io.TeeReader(zr, dg.Hash()), desc, i, applyQ)
	close(applyQ)
	wg.Wait()
	if applyErr != nil {
		return applyErr
	}
	if err == nil {
		// drain the gzip trailer so the compressed stream is read (and committed) whole
		_, err = io.Copy(io.Discard, src)
	}
	if err != nil {
		return err
	}
	if dg.Digest() != diffID {
		return fmt.Errorf("layer %d (%s) unpacks to %s, config says %s", i, desc.Digest, dg.Digest(), diffID)
	}
	return nil
}

// chunk is a temporary blob being written: its bytes go out through aw while the next one fills.
type chunk struct {
	seq  int
	w    content.Writer
	aw   *asyncWriter
	size int64
}

func (c *chunk) abort() {
	_ = c.aw.Close()
	c.w.Close()
}

// applyChunk commits a chunk, has the daemon apply it to the layer's snapshot, and deletes it.
func (b *Backend) applyChunk(ctx context.Context, c *chunk, mounts []mount.Mount, i int) error {
	defer c.w.Close()
	if err := c.aw.Close(); err != nil {
		return fmt.Errorf("write chunk %d of layer %d: %w", c.seq, i, err)
	}
	t0 := time.Now()
	if err := c.w.Commit(ctx, c.size, ""); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("commit chunk %d of layer %d: %w", c.seq, i, err)
	}
	t1 := time.Now()
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: c.w.Digest(), Size: c.size}
	defer func() { _ = b.client.ContentStore().Delete(context.WithoutCancel(ctx), d.Digest) }()
	if _, err := b.client.DiffService().Apply(ctx, d, mounts); err != nil {
		return fmt.Errorf("apply chunk %d of layer %d: %w", c.seq, i, err)
	}
	b.opts.Log.Debug("chunk applied", "layer", i, "chunk", c.seq, "bytes", c.size,
		"commit_seconds", t1.Sub(t0).Seconds(), "apply_seconds", time.Since(t1).Seconds())
	return nil
}

// cutChunks writes the tar stream into temporary blobs of about streamChunk bytes, each ending at
// an entry boundary (plus an end-of-archive marker), and queues each for commit and apply.
func (b *Backend) cutChunks(ctx context.Context, tarStream io.Reader, desc ocispec.Descriptor, i int, applyQ chan<- *chunk) error {
	cs := b.client.ContentStore()
	cut := newTarCutter()
	buf := make([]byte, 1<<20)
	var cur *chunk
	seq := 0
	send := func(trailer bool) error {
		if cur == nil {
			return nil
		}
		c := cur
		cur = nil
		if trailer {
			if _, err := c.aw.Write(make([]byte, 1024)); err != nil {
				c.abort()
				return fmt.Errorf("write chunk %d of layer %d: %w", c.seq, i, err)
			}
			c.size += 1024
		}
		select {
		case applyQ <- c:
			return nil
		case <-ctx.Done():
			c.abort()
			return ctx.Err()
		}
	}
	defer func() {
		if cur != nil {
			cur.abort()
		}
	}()
	for {
		n, rerr := io.ReadFull(tarStream, buf)
		p := buf[:n]
		for len(p) > 0 {
			if cur == nil {
				seq++
				ref := fmt.Sprintf("warmd-chunk-%s-%d-%d", desc.Digest.Encoded()[:16], seq, time.Now().UnixNano())
				w, err := content.OpenWriter(ctx, cs, content.WithRef(ref))
				if err != nil {
					return fmt.Errorf("open chunk writer: %w", err)
				}
				cur = &chunk{seq: seq, w: w, aw: newAsyncWriter(w, writeBlock, 4)}
			}
			k, at := cut.next(p)
			if _, err := cur.aw.Write(p[:k]); err != nil {
				return fmt.Errorf("write chunk %d of layer %d: %w", seq, i, err)
			}
			cur.size += int64(k)
			p = p[k:]
			if at && cur.size >= streamChunk {
				if err := send(true); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return send(false)
		}
		if rerr != nil {
			return fmt.Errorf("gunzip layer %d (%s): %w", i, desc.Digest, rerr)
		}
	}
}

// bindToOverlay turns the bind mount a parentless overlay snapshot returns into an overlay mount
// with only an upper dir, so the daemon's applier writes overlay whiteouts (containerd's unpacker
// does the same for parallel unpack).
func bindToOverlay(mounts []mount.Mount) []mount.Mount {
	if len(mounts) != 1 || mounts[0].Type != "bind" {
		return mounts
	}
	m := mount.Mount{Type: "overlay", Source: "overlay"}
	for _, o := range mounts[0].Options {
		if o != "rbind" {
			m.Options = append(m.Options, o)
		}
	}
	m.Options = append(m.Options, "upperdir="+mounts[0].Source)
	return []mount.Mount{m}
}

// countReader reports bytes read, every 4 MiB.
type countReader struct {
	r    io.Reader
	n    int64
	last int64
	fn   func(int64)
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n-c.last >= 4<<20 {
		c.last = c.n
		c.fn(c.n)
	}
	return n, err
}
