package containerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
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
	"github.com/containerd/containerd/v2/core/transfer"
	"github.com/containerd/containerd/v2/core/transfer/image"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/oci"
)

// The parallel path (containerd 2.x whose snapshotter can rebase) splits a pull between the daemon
// and warmd so that layers are unpacked side by side, each as soon as its bytes are in, instead of
// one after the other in manifest order as the daemon's unpacker does by default
// (max_concurrent_unpacks = 1, which is what `ctr images pull` and the CRI get):
//
//   - the daemon's Transfer service fetches every layer into its content store (its own HTTP
//     client, hosts.toml and credentials from warmd's callback, no unpack), streaming progress;
//   - the moment a layer is reported complete, warmd prepares a parentless snapshot for it and has
//     the daemon's diff service apply it there, while other layers are still being fetched or
//     applied; the applier checks the diff ID warmd compares with the config;
//   - once all are in, warmd commits the chain bottom-up, rebasing each snapshot onto its parent
//     (the snapshotter's "rebase" capability, as containerd's own unpacker does in parallel mode),
//     labels the config and layers as the daemon's unpacker would, and writes the image record.
//
// The bytes never pass through warmd: an experiment that fetched and gunzipped in warmd and fed the
// daemon tar chunks lost to plain `ctr` by 2-3x on a 2-core node, because content writes from a
// client cross the gRPC stream at about 40 MB/s. What a pod sees is the same as after a Transfer
// pull: the image record, content with the GC labels, committed snapshots named by chain ID.

// PathParallel is the parallel-unpack API path.
const PathParallel = "parallel"

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

// pullParallel pulls r as described above.
func (b *Backend) pullParallel(ctx context.Context, r prefetch.Resolved, progress func(prefetch.Progress)) error {
	pr, err := oci.ParseRef(r.Name)
	if err != nil {
		return err
	}
	ctx, done, err := b.client.WithLease(ctx)
	if err != nil {
		return fmt.Errorf("lease for %s: %w", r.Name, err)
	}
	defer done(context.WithoutCancel(ctx))
	fetcher, err := b.opts.Registry.Resolver(ctx, pr.Host).Fetcher(ctx, r.Name)
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
	sn := b.client.SnapshotService(b.opts.Snapshotter)

	// Layers whose chain already exists are done (as in containerd's unpacker); the lowest missing
	// one and everything above it are unpacked.
	first := len(layers)
	for i := len(layers) - 1; i >= 0; i-- {
		if _, err := sn.Stat(ctx, chain[i].String()); err == nil {
			break
		}
		first = i
	}

	// ready[i] closes when layer i's blob is in the content store.
	ready := make([]chan struct{}, len(layers))
	byDigest := map[digest.Digest][]int{}
	for i := range layers {
		ready[i] = make(chan struct{})
		byDigest[layers[i].Digest] = append(byDigest[layers[i].Digest], i)
	}
	var once sync.Map
	markReady := func(d digest.Digest) {
		for _, i := range byDigest[d] {
			if _, loaded := once.LoadOrStore(i, true); !loaded {
				b.opts.Log.Debug("layer fetched", "layer", i, "digest", d, "bytes", layers[i].Size)
				close(ready[i])
			}
		}
	}
	fetched := make(chan error, 1)
	tr := oci.NewTracker(r, progress)
	var peers []string
	if first < len(layers) { // a layer is missing: peers may hold it
		peers = b.peersFor(ctx, r)
	}
	go func() {
		// Layers warm peers hold come from them first (each ready as it lands, so its apply starts);
		// the daemon then fetches what is left, finding those in the content store.
		b.fromPeers(ctx, r, peers, layers[first:], tr, markReady)
		fetched <- b.transferContent(ctx, r, tr, markReady)
	}()

	keys := make([]string, len(layers))
	implicit := make([]*implicitDirs, len(layers))
	g, gctx := errgroup.WithContext(ctx)
	var fetchErr error
	fetchDone := make(chan struct{})
	go func() {
		fetchErr = <-fetched
		close(fetchDone)
	}()
	// Layers are applied side by side, each as soon as its blob is in, at most one per core at once
	// (a big layer with an index decodes on every core by itself); fetching runs ahead.
	slots := make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))
	for i := first; i < len(layers); i++ {
		g.Go(func() error {
			select {
			case <-ready[i]:
			case <-fetchDone: // done without a completion event for this layer: it is in, or failed
				if fetchErr != nil {
					return fetchErr
				}
			case <-gctx.Done():
				return gctx.Err()
			}
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-gctx.Done():
				return gctx.Err()
			}
			key, u, rec, err := b.applyLayer(gctx, layers[i], diffIDs[i], chain, i)
			keys[i], implicit[i] = key, rec
			if err == nil {
				tr.Unpacked(layers[i].Digest, u)
			}
			return err
		})
	}
	err = g.Wait()
	<-fetchDone
	if err == nil {
		err = fetchErr
	}
	if err == nil {
		err = b.commitChain(ctx, sn, layers, diffIDs, chain, keys, implicit, first)
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

// transferContent has the daemon fetch r (no unpack) and calls ready with each layer digest as it
// lands in the content store.
func (b *Backend) transferContent(ctx context.Context, r prefetch.Resolved, tr *oci.Tracker, ready func(digest.Digest)) error {
	src, err := b.transferSource(ctx, r)
	if err != nil {
		return err
	}
	dst := image.NewStore(r.Name,
		image.WithPlatforms(b.platformOf()),
		image.WithManifestLimit(1),
		image.WithImageLabels(pullLabels()))
	err = b.client.Transfer(ctx, src, dst, transfer.WithProgress(func(ev transfer.Progress) {
		if ev.Desc == nil {
			return
		}
		switch ev.Event {
		case "complete", "already exists":
			tr.Set(ev.Desc.Digest, ev.Total, true)
			ready(ev.Desc.Digest)
		default:
			tr.Set(ev.Desc.Digest, ev.Progress, false)
		}
	}))
	if err != nil {
		return fmt.Errorf("fetch %s: %w", r.Name, err)
	}
	return nil
}

// applyLayer prepares layer i's snapshot (parentless: the chain is rebased at commit), applies the
// blob (warmd itself on the warmd path, else the daemon's diff service), checks the diff ID, and
// returns the snapshot's key, how the layer was unpacked and, on the warmd path, the implicit parent
// directories commitChain gives their lower layers' attributes (nil for the bottom layer).
func (b *Backend) applyLayer(ctx context.Context, desc ocispec.Descriptor, diffID digest.Digest, chain []digest.Digest, i int) (string, prefetch.LayerUnpack, *implicitDirs, error) {
	key, mounts, err := b.prepareLayer(ctx, desc, diffID, chain, i, false)
	if err != nil {
		return key, prefetch.LayerUnpack{}, nil, err
	}
	var rec *implicitDirs
	if b.path == PathWarmd {
		record := i > 0
		st, err := b.applyOwn(ctx, desc, diffID, mounts, true, record)
		if err != nil && st.Decoder == "gzip-warmd-indexed" && ctx.Err() == nil {
			// A stored index that does not fit this layer costs only itself: drop the snapshot it
			// wrote into and decode serially (which records a fresh index).
			why := err.Error()
			b.opts.Log.Warn("layer's gzip index failed; decoding it serially", "layer", i, "digest", desc.Digest, "err", err)
			_ = b.client.SnapshotService(b.opts.Snapshotter).Remove(context.WithoutCancel(ctx), key)
			if err := b.opts.Indexes.Remove(ctx, desc.Digest); err != nil {
				b.opts.Log.Warn("could not drop the layer's gzip index", "digest", desc.Digest, "err", err)
			}
			if key, mounts, err = b.prepareLayer(ctx, desc, diffID, chain, i, false); err != nil {
				return key, prefetch.LayerUnpack{}, nil, err
			}
			st, err = b.applyOwn(ctx, desc, diffID, mounts, false, record)
			st.IndexDiscarded = why
		}
		if !errors.Is(err, errUnsupported) {
			if err != nil {
				return key, prefetch.LayerUnpack{}, nil, fmt.Errorf("layer %d: %w", i, err)
			}
			b.opts.Log.Info("layer unpacked by warmd", "layer", i, "digest", desc.Digest, "decoder", st.Decoder,
				"compressed", st.Compressed, "inflated", st.Inflated, "seconds", st.Seconds, "indexBuilt", st.IndexBuilt)
			b.stats.add(st)
			return key, st.report(), st.implicit, b.labelUncompressed(ctx, desc, diffID)
		}
		b.opts.Log.Info("warmd does not write this layer's mounts; the daemon applies it", "layer", i, "err", err)
		if record {
			rec = &implicitDirs{unrecorded: true} // applied again onto its parent, with the daemon's parents
		}
	}
	u, err := b.daemonApply(ctx, desc, diffID, mounts, i)
	return key, u, rec, err
}

// daemonApply has the daemon's diff service apply layer i onto mounts and checks the diff ID.
func (b *Backend) daemonApply(ctx context.Context, desc ocispec.Descriptor, diffID digest.Digest, mounts []mount.Mount, i int) (prefetch.LayerUnpack, error) {
	t0 := time.Now()
	got, err := b.client.DiffService().Apply(ctx, desc, mounts)
	if err != nil {
		return prefetch.LayerUnpack{}, fmt.Errorf("apply layer %d (%s): %w", i, desc.Digest, err)
	}
	u := prefetch.LayerUnpack{By: "daemon", Seconds: time.Since(t0).Seconds()}
	b.opts.Log.Debug("layer applied", "layer", i, "bytes", desc.Size, "seconds", u.Seconds)
	if got.Digest != diffID {
		return u, fmt.Errorf("layer %d (%s) unpacks to %s, config says %s", i, desc.Digest, got.Digest, diffID)
	}
	return u, b.labelUncompressed(ctx, desc, diffID)
}

// applyOnParent applies layer i the serial way, onto its committed parent, for a layer whose implicit
// parent directories could not be fixed after a parentless apply. Its index, if any, was just
// checked or built, so a big layer still decodes on every core.
func (b *Backend) applyOnParent(ctx context.Context, desc ocispec.Descriptor, diffID digest.Digest, chain []digest.Digest, i int) (string, error) {
	key, mounts, err := b.prepareLayer(ctx, desc, diffID, chain, i, true)
	if err != nil {
		return key, err
	}
	_, err = b.applyOwn(ctx, desc, diffID, mounts, true, false)
	if errors.Is(err, errUnsupported) {
		_, err = b.daemonApply(ctx, desc, diffID, mounts, i)
	}
	return key, err
}

// prepareLayer makes layer i's snapshot, parentless unless onParent, and returns its key and mounts.
func (b *Backend) prepareLayer(ctx context.Context, desc ocispec.Descriptor, diffID digest.Digest, chain []digest.Digest, i int, onParent bool) (string, []mount.Mount, error) {
	sn := b.client.SnapshotService(b.opts.Snapshotter)
	key := fmt.Sprintf(snapshots.UnpackKeyFormat, strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strconv.Itoa(i), chain[i])
	parent := ""
	if onParent && i > 0 {
		parent = chain[i-1].String()
	}
	mounts, err := sn.Prepare(ctx, key, parent, snapshots.WithLabels(snapshotLabels(desc, diffID, chain, i)))
	if err != nil {
		return "", nil, fmt.Errorf("prepare snapshot for layer %d (%s): %w", i, desc.Digest, err)
	}
	if i > 0 && parent == "" {
		mounts = bindToOverlay(mounts) // so the applier writes overlay whiteouts, as containerd's unpacker does
	}
	return key, mounts, nil
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

// commitChain commits the layers' snapshots bottom-up, rebasing each onto its parent chain. On the
// warmd path each layer's implicit parent directories first get their lower layers' attributes
// (implicitDirs), or, where that cannot be done after the fact, the layer is applied again onto its
// committed parent.
func (b *Backend) commitChain(ctx context.Context, sn snapshots.Snapshotter, layers []ocispec.Descriptor, diffIDs, chain []digest.Digest, keys []string, implicit []*implicitDirs, first int) error {
	for i := first; i < len(layers); i++ {
		if rec := implicit[i]; rec != nil && keys[i] != "" {
			err := b.fixParents(ctx, sn, chain[i-1], rec)
			if errors.Is(err, errRedoSerial) {
				b.opts.Log.Info("layer applied again onto its parent", "layer", i, "digest", layers[i].Digest, "why", err)
				_ = sn.Remove(context.WithoutCancel(ctx), keys[i])
				keys[i] = ""
				keys[i], err = b.applyOnParent(ctx, layers[i], diffIDs[i], chain, i)
			}
			if err != nil {
				return fmt.Errorf("layer %d (%s): %w", i, layers[i].Digest, err)
			}
		}
		if err := b.commitLayer(ctx, sn, layers, diffIDs, chain, keys, i); err != nil {
			return err
		}
	}
	return nil
}

// fixParents runs rec's fixup against the layers of the committed parent chain.
func (b *Backend) fixParents(ctx context.Context, sn snapshots.Snapshotter, parent digest.Digest, rec *implicitDirs) error {
	if rec.unrecorded {
		return fmt.Errorf("%w: the daemon applied it without its parents", errRedoSerial)
	}
	if len(rec.dirs) == 0 && !rec.overflow {
		return nil
	}
	key := "warmd-parents-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + parent.Encoded()
	mounts, err := sn.View(ctx, key, parent.String())
	if err != nil {
		return fmt.Errorf("view parent %s: %w", parent, err)
	}
	defer sn.Remove(context.WithoutCancel(ctx), key)
	return rec.fixup(lowerDirs(mounts))
}

// commitLayer commits layer i's snapshot as its chain ID (a no-op once committed).
func (b *Backend) commitLayer(ctx context.Context, sn snapshots.Snapshotter, layers []ocispec.Descriptor, diffIDs, chain []digest.Digest, keys []string, i int) error {
	if keys[i] == "" {
		return nil
	}
	opts := []snapshots.Opt{snapshots.WithLabels(snapshotLabels(layers[i], diffIDs[i], chain, i))}
	if i > 0 {
		opts = append(opts, snapshots.WithParent(chain[i-1].String()))
	}
	if err := sn.Commit(ctx, chain[i].String(), keys[i], opts...); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("commit layer %d (%s): %w", i, layers[i].Digest, err)
	}
	keys[i] = ""
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

// labelUncompressed records the verified diff ID on the layer blob, as containerd's unpacker does.
func (b *Backend) labelUncompressed(ctx context.Context, desc ocispec.Descriptor, diffID digest.Digest) error {
	info := content.Info{Digest: desc.Digest, Labels: map[string]string{labels.LabelUncompressed: diffID.String()}}
	if _, err := b.client.ContentStore().Update(ctx, info, "labels."+labels.LabelUncompressed); err != nil {
		return fmt.Errorf("label layer %s: %w", desc.Digest, err)
	}
	return nil
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
