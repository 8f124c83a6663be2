package containerd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/inflate"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/oci"
	"warmd.io/warmd/pkg/prefetch/images/peerblobs"
)

// Peers is how the backend takes layer blobs from warm peers before the daemon fetches the rest
// from the registry (peers.enabled, with an API server to find them).
type Peers struct {
	// Find returns the base URLs of peers that may hold the image name's layers (the daemon's: nodes
	// whose labels say a model served by the image is warm there), at most a few, in random order.
	Find func(ctx context.Context, name string) ([]string, error)
	// Fetch tunes the fetch of each blob (token, node name, metrics callbacks).
	Fetch peerblobs.Options
	// MinSize is the smallest layer asked of peers; smaller ones come with the rest from the
	// registry (a request each either way). Default DefaultPeerMinSize.
	MinSize int64
	// Layers bounds the blobs fetched from peers at once. Default 2.
	Layers int
}

// DefaultPeerMinSize: layers under 1 MiB cost the registry one small request; asking peers first
// would only add a round trip.
const DefaultPeerMinSize = 1 << 20

// peerDir is the directory, under the content store's root and beside its blobs, where blobs from
// peers are written before they are verified and renamed into blobs/sha256/ (the same filesystem,
// so the rename is atomic; containerd reads only blobs/ and ingest/ there).
var peerDir = fsroot.MustPath("warmd-peers")

// ErrNotShared is the refusal of a daemon whose metadata store does not take a blob already in its
// content dir into a namespace without rewriting it (content_sharing_policy = "isolated"): peers'
// blobs cannot be handed to it and the registry serves every layer.
var ErrNotShared = errors.New("containerd's content_sharing_policy is isolated: a blob placed in its content store is not shared into the namespace (set it to shared, containerd's default, to take layers from peers)")

// openContent opens the daemon's content store root (reported by introspection) for the peer
// paths: reading blobs to serve and placing blobs from peers. nil when it is not visible here.
func (b *Backend) openContent(ctx context.Context) *fsroot.Root {
	b.contentOnce.Do(func() {
		dir := b.roots.content
		if dir == "" {
			resp, err := b.client.IntrospectionService().Plugins(ctx, "type==io.containerd.content.v1")
			if err != nil {
				b.opts.Log.Info("cannot ask containerd for its content store; image layers are not shared with peers", "err", err)
				return
			}
			for _, p := range resp.Plugins {
				if p.ID == "content" {
					dir = p.Exports["root"]
				}
			}
		}
		r, err := fsroot.Open(dir)
		if err != nil {
			b.opts.Log.Info("containerd's content store is not visible here (mount the containerd root into warmd's pod at the same path); image layers are not shared with peers", "dir", dir, "err", err)
			return
		}
		if _, err := r.RemoveTemps(peerDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			b.opts.Log.Warn("remove unfinished blobs from peers", "err", err)
		}
		b.content = r
	})
	return b.content
}

// LocalIndexes is what an IndexStore offers the peer paths (layerindex.Dir and Shared): this node's
// own index file of a layer, to serve, and a store that keeps an index from a peer on this node only
// (never shared on before a decode proved it).
type LocalIndexes interface {
	Open(layer digest.Digest) (*os.File, error)
	PutLocal(ctx context.Context, layer digest.Digest, index []byte) error
}

// OpenIndex implements the peer server's LayerOpener: the checkpoint index this node keeps for a
// layer it serves (see OpenBlob).
func (b *Backend) OpenIndex(ctx context.Context, sha string) (*os.File, error) {
	d := digest.NewDigestFromEncoded(digest.SHA256, sha)
	li, ok := b.opts.Indexes.(LocalIndexes)
	if d.Validate() != nil || !ok {
		return nil, fs.ErrNotExist
	}
	if _, served := b.servedLayers(ctx)[d]; !served {
		return nil, fs.ErrNotExist
	}
	return li.Open(d)
}

func blobPath(d digest.Digest) fsroot.Path {
	return fsroot.MustPath("blobs/sha256/" + d.Encoded()) // callers checked d is a sha256 digest
}

// OpenBlob implements the peer server's LayerOpener: the blob with sha256 sha, when it is a layer of
// an image warmd pulled and pinned here (the managed images' manifests, looked at again at most
// every 10 s), opened from the content store's own file.
func (b *Backend) OpenBlob(ctx context.Context, sha string) (*os.File, error) {
	d := digest.NewDigestFromEncoded(digest.SHA256, sha)
	if d.Validate() != nil {
		return nil, fs.ErrNotExist
	}
	size, ok := b.servedLayers(ctx)[d]
	root := b.openContent(ctx)
	if !ok || root == nil {
		return nil, fs.ErrNotExist
	}
	f, err := root.Open(blobPath(d))
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		f.Close()
		return nil, fmt.Errorf("layer %s in the content store is not the %d bytes its manifest says", d, size)
	}
	return f, nil
}

// servedLayers is every layer (digest → size) of the managed, pinned images, for the node's
// platform, cached for 10 s.
func (b *Backend) servedLayers(ctx context.Context) map[digest.Digest]int64 {
	b.servedMu.Lock()
	defer b.servedMu.Unlock()
	if b.served != nil && time.Since(b.servedAt) < 10*time.Second {
		return b.served
	}
	imgs, err := b.client.ImageService().List(ctx, `labels."`+prefetch.LabelManaged+`"==true`)
	if err != nil {
		b.opts.Log.Warn("list managed images for peers", "err", err)
		return b.served
	}
	out := map[digest.Digest]int64{}
	cs := b.client.ContentStore()
	for _, img := range imgs {
		if img.Labels[prefetch.LabelPinned] != prefetch.PinnedValue {
			continue
		}
		m, err := images.Manifest(ctx, cs, img.Target, platforms.Only(b.platformOf()))
		if err != nil {
			continue
		}
		for _, l := range m.Layers {
			out[l.Digest] = l.Size
		}
	}
	b.served, b.servedAt = out, time.Now()
	return out
}

// peersFor returns the peers to ask for r's layers: none without Peers, once the daemon refused a
// placed blob, or when Find finds none (peers.enabled off among them), so a pull without peers
// does no work for them.
func (b *Backend) peersFor(ctx context.Context, r prefetch.Resolved) []string {
	p := b.opts.Peers
	if p == nil || p.Find == nil || b.notShared.Load() {
		return nil
	}
	peers, err := p.Find(ctx, r.Name)
	if err != nil {
		b.opts.Log.Info("no peers asked for image layers", "image", r.Name, "err", err)
	}
	return peers
}

// fromPeers takes the layers of r that are not in the content store yet from the peers that hold
// them, each verified against its digest, placed in the content store and committed into the
// namespace under ctx's lease (the pull's), so the daemon's fetch finds it there and reads nothing
// from the registry. ready is called with each layer so placed; tr hears of the bytes received and
// of each layer placed. A layer no peer holds, or whose peers fail or send wrong bytes, is left to
// the daemon; fromPeers never fails the pull.
func (b *Backend) fromPeers(ctx context.Context, r prefetch.Resolved, peers []string, layers []ocispec.Descriptor, tr *oci.Tracker, ready func(digest.Digest)) {
	p := b.opts.Peers
	if len(peers) == 0 {
		return
	}
	cs := b.client.ContentStore()
	var want []ocispec.Descriptor
	seen := map[digest.Digest]bool{}
	for _, l := range layers {
		if l.Size < max(p.MinSize, 1) || seen[l.Digest] || l.Digest.Algorithm() != digest.SHA256 || l.Digest.Validate() != nil {
			continue
		}
		seen[l.Digest] = true
		if _, err := cs.Info(ctx, l.Digest); err == nil {
			continue // already here
		}
		want = append(want, l)
	}
	if len(want) == 0 {
		return
	}
	root := b.openContent(ctx)
	if root == nil {
		return
	}
	var g errgroup.Group
	g.SetLimit(max(p.Layers, 1))
	for _, l := range want {
		g.Go(func() error {
			if b.notShared.Load() {
				return nil // the daemon cannot take a blob from peers: the registry serves them all
			}
			t0 := time.Now()
			res, err := b.fetchPlace(ctx, root, peers, l, tr)
			switch {
			case err == nil:
				tr.FromPeers(l.Digest)
				b.opts.Log.Info("layer taken from peers", "image", r.Name, "layer", l.Digest.String(), "bytes", l.Size,
					"peers", len(res.Holders), "dropped", res.Dropped, "busy", res.Busy, "seconds", time.Since(t0).Seconds())
				ready(l.Digest)
			case errors.Is(err, peerblobs.ErrNoPeer):
			case errors.Is(err, ErrNotShared):
				if !b.notShared.Swap(true) {
					b.opts.Log.Warn("image layers cannot be taken from peers", "err", err)
				}
			default:
				b.opts.Log.Warn("layer not taken from peers; the registry serves it", "image", r.Name, "layer", l.Digest.String(), "err", err)
			}
			return nil
		})
	}
	_ = g.Wait()
}

// fetchPlace fetches l from peers into a temp file beside the content store's blobs, renames it
// into blobs/sha256/ once it matched its digest (read-only, as containerd leaves its blobs) and
// commits it into the namespace without a byte over gRPC.
func (b *Backend) fetchPlace(ctx context.Context, root *fsroot.Root, peers []string, l ocispec.Descriptor, tr *oci.Tracker) (peerblobs.Result, error) {
	t, err := root.CreateTemp(peerDir, l.Digest.Encoded())
	if err != nil {
		return peerblobs.Result{}, fmt.Errorf("stage layer %s: %w", l.Digest, err)
	}
	defer t.Abort() // after the commit it does nothing
	o := b.opts.Peers.Fetch
	o.OnProgress = func(n int64) { tr.Set(l.Digest, n, false) }
	res, err := peerblobs.Fetch(ctx, o, peers, l.Digest, l.Size, t.File)
	if err != nil {
		return res, err
	}
	if err := t.Chmod(0o444); err != nil {
		return res, fmt.Errorf("stage layer %s: %w", l.Digest, err)
	}
	if err := t.CommitNoReplace(blobPath(l.Digest)); err != nil && !errors.Is(err, fs.ErrExist) {
		return res, fmt.Errorf("place layer %s in the content store: %w", l.Digest, err)
	}
	if err := b.share(ctx, l); err != nil {
		return res, err
	}
	b.indexFromPeers(ctx, res.Holders, l)
	return res, nil
}

// indexFromPeers keeps the checkpoint index of gzip layer l from one of the peers that held it,
// when this node has none: the layer then decodes on every core at once. The index is validated
// against the layer's size before it is kept, and its decode is checked against the diff ID like any
// index; one that fails costs a serial decode.
func (b *Backend) indexFromPeers(ctx context.Context, holders []string, l ocispec.Descriptor) {
	li, ok := b.opts.Indexes.(LocalIndexes)
	if !ok || mediaKind(l.MediaType) != "gzip" {
		return
	}
	if p, err := b.opts.Indexes.Get(ctx, l.Digest); err == nil && p != nil {
		return
	}
	p, from, err := peerblobs.FetchIndex(ctx, b.opts.Peers.Fetch, holders, l.Digest, MaxIndexBytes)
	if err != nil {
		b.opts.Log.Debug("no checkpoint index from peers", "layer", l.Digest.String(), "err", err)
		return
	}
	if _, err := inflate.UnmarshalIndex(p, l.Size); err != nil {
		b.opts.Log.Warn("a peer's checkpoint index is not valid for the layer; it decodes serially", "peer", from, "layer", l.Digest.String(), "err", err)
		return
	}
	if err := li.PutLocal(ctx, l.Digest, p); err != nil {
		b.opts.Log.Warn("could not keep a peer's checkpoint index", "layer", l.Digest.String(), "err", err)
	}
}

// share commits the blob l, present in the content store's dir, into the namespace: with
// containerd's shared policy the metadata store's writer finds it in place, reports it whole and
// records it at commit, under ctx's lease.
func (b *Backend) share(ctx context.Context, l ocispec.Descriptor) error {
	cs := b.client.ContentStore()
	ref := "warmd-peer-" + l.Digest.Encoded()
	w, err := content.OpenWriter(ctx, cs, content.WithRef(ref), content.WithDescriptor(l))
	if errdefs.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("share layer %s into namespace %s: %w", l.Digest, b.opts.Namespace, err)
	}
	defer w.Close()
	st, err := w.Status()
	if err != nil || st.Offset != l.Size {
		_ = cs.Abort(context.WithoutCancel(ctx), ref)
		if err != nil {
			return fmt.Errorf("share layer %s: %w", l.Digest, err)
		}
		return ErrNotShared
	}
	if err := w.Commit(ctx, l.Size, l.Digest); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("share layer %s into namespace %s: %w", l.Digest, b.opts.Namespace, err)
	}
	return nil
}
