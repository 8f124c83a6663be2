// Package containerd is the Images backend that pulls through the node's containerd daemon (the one
// the kubelet uses), in its namespace and into its CRI snapshotter, so pods find the image unpacked.
//
// It prefers containerd's Transfer API (the daemon fetches, unpacks, and streams per-layer progress;
// parallel.go is an opt-in variant where warmd unpacks layers side by side as they arrive). It falls back to the client-side Pull with progress from polling the content store's ListStatuses
// when the daemon lacks the transfer and streaming services (containerd 1.6). The path is detected
// once, when the backend is created, and logged. It does not decide what to pull or when (pkg/prefetch/images
// does) and never touches images without warmd's label except to read them.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/oci"
)

// API paths a pull can take.
const (
	PathTransfer = "transfer"
	PathPull     = "pull"
)

// Options configure the backend.
type Options struct {
	// Address is the containerd socket (absolute path).
	Address string
	// Namespace is the kubelet's namespace, k8s.io.
	Namespace string
	// Snapshotter is the CRI plugin's snapshotter (overlayfs by default).
	Snapshotter string
	Registry    oci.Registry
	// Path forces "parallel", "transfer" or "pull"; empty detects transfer where the daemon has the
	// Transfer API, else pull (containerd 1.6). Parallel (warmd unpacks layers side by side, see
	// parallel.go) is chosen only when asked for: on a busy 2-core node it measured slower than the
	// daemon's own in-order unpack, so it is not the default.
	Path string
	// MaxConcurrentDownloads bounds layers fetched at once on the pull path. Default 3.
	MaxConcurrentDownloads int
	// PollInterval is how often ListStatuses is polled for progress on the pull path. Default 250ms.
	PollInterval time.Duration
	// Indexes keeps gzip checkpoint indexes for the warmd path; nil keeps none (every layer
	// inflates serially).
	Indexes IndexStore
	// Peers, when set, has layer blobs taken from warm peers before the daemon fetches the rest
	// (peers.go).
	Peers *Peers
	// DialTimeout bounds connecting to the socket. Default 10s.
	DialTimeout time.Duration
	Log         *slog.Logger
}

// Backend pulls, unpacks and pins images through containerd.
type Backend struct {
	opts    Options
	roots   roots // the daemon's content and snapshot dirs (warmd path)
	stats   unpackStats
	client  *client.Client
	info    prefetch.BackendInfo
	path    string
	version string

	contentOnce sync.Once
	content     *fsroot.Root // the daemon's content store root, for peers (nil: not visible)
	notShared   atomic.Bool  // the daemon refused a placed blob (ErrNotShared): peers are not asked again
	servedMu    sync.Mutex
	served      map[digest.Digest]int64
	servedAt    time.Time
}

var _ prefetch.Images = (*Backend)(nil)

// New connects to containerd, detects once whether it offers the Transfer API, and logs the path.
func New(ctx context.Context, opts Options) (*Backend, error) {
	if opts.Namespace == "" {
		opts.Namespace = "k8s.io"
	}
	if opts.Snapshotter == "" {
		opts.Snapshotter = "overlayfs"
	}
	if opts.MaxConcurrentDownloads <= 0 {
		opts.MaxConcurrentDownloads = 3
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 10 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Registry.Platform.OS == "" {
		opts.Registry.Platform = platforms.DefaultSpec()
	}
	if _, err := os.Stat(opts.Address); err != nil {
		return nil, fmt.Errorf("no containerd socket at %s: %w (check containerd.address and that the socket is mounted)", opts.Address, err)
	}
	c, err := client.New(opts.Address, client.WithDefaultNamespace(opts.Namespace), client.WithTimeout(opts.DialTimeout))
	if err != nil {
		return nil, fmt.Errorf("connect to containerd at %s: %w (check containerd.address and that the socket is mounted)", opts.Address, err)
	}
	vctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	v, err := c.Version(vctx)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("containerd at %s does not answer: %w (check containerd.address and that the socket is mounted)", opts.Address, err)
	}
	b := &Backend{opts: opts, client: c, version: v.Version}
	b.path = opts.Path
	if b.path == "" {
		b.path = PathPull
		if ok, why := hasTransfer(vctx, c); ok {
			b.path = PathTransfer
		} else {
			opts.Log.Info("containerd lacks the Transfer API; falling back to client-side Pull with ListStatuses progress", "version", v.Version, "why", why)
		}
	}
	if b.path == PathParallel {
		if ok, why := hasTransfer(vctx, c); !ok {
			c.Close()
			return nil, fmt.Errorf("containerd API path parallel needs the Transfer API, which containerd %s at %s lacks (%s): set containerd.unpack: daemon", v.Version, opts.Address, why)
		}
		if !hasRebase(vctx, c, opts.Snapshotter) {
			c.Close()
			return nil, fmt.Errorf("containerd API path parallel needs a snapshotter that can rebase, which %s cannot: set containerd.unpack: daemon, or use overlayfs", opts.Snapshotter)
		}
	}
	if b.path == PathWarmd {
		why := ""
		if ok, w := hasTransfer(vctx, c); !ok {
			why = "the daemon lacks the Transfer API (" + w + ")"
		} else if !hasRebase(vctx, c, opts.Snapshotter) {
			why = "snapshotter " + opts.Snapshotter + " cannot rebase"
		} else if b.roots, err = findRoots(vctx, c, opts.Snapshotter); err != nil {
			why = err.Error()
		}
		if why != "" {
			b.path = PathPull
			if ok, _ := hasTransfer(vctx, c); ok {
				b.path = PathTransfer
			}
			opts.Log.Warn("warmd cannot unpack on this node; the daemon unpacks instead", "why", why, "path", b.path)
		}
	}
	if b.path != PathTransfer && b.path != PathPull && b.path != PathParallel && b.path != PathWarmd {
		c.Close()
		return nil, fmt.Errorf("containerd API path %q is not warmd, parallel, transfer or pull", b.path)
	}
	b.info = prefetch.BackendInfo{
		Name: "containerd",
		Path: b.path,
		Detail: fmt.Sprintf("containerd %s at %s, %s API, namespace %s, snapshotter %s, platform %s",
			v.Version, opts.Address, b.path, opts.Namespace, opts.Snapshotter, platforms.Format(opts.Registry.Platform)),
	}
	opts.Log.Info("image backend ready", "backend", "containerd", "version", v.Version, "path", b.path,
		"socket", opts.Address, "namespace", opts.Namespace, "snapshotter", opts.Snapshotter)
	return b, nil
}

// hasTransfer asks the daemon's introspection service for the transfer and streaming gRPC services;
// containerd 1.6 has neither and answers Transfer with "unknown service".
func hasTransfer(ctx context.Context, c *client.Client) (bool, string) {
	resp, err := c.IntrospectionService().Plugins(ctx, "type==io.containerd.grpc.v1")
	if err != nil {
		return false, "introspection: " + err.Error()
	}
	found := map[string]bool{}
	for _, p := range resp.Plugins {
		if p.InitErr == nil {
			found[p.ID] = true
		}
	}
	if !found["transfer"] || !found["streaming"] {
		return false, "no io.containerd.grpc.v1 transfer and streaming services"
	}
	return true, ""
}

// Backend implements prefetch.Images.
func (b *Backend) Backend() prefetch.BackendInfo { return b.info }

// Path is the detected API path.
func (b *Backend) Path() string { return b.path }

// Client exposes the containerd client (tests and the benchmark read images through it).
func (b *Backend) Client() *client.Client { return b.client }

// Close implements prefetch.Images.
func (b *Backend) Close() error {
	if c, ok := b.opts.Indexes.(io.Closer); ok {
		_ = c.Close() // a shared index store finishes its uploads
	}
	return b.client.Close()
}

// Resolve implements prefetch.Images.
func (b *Backend) Resolve(ctx context.Context, ref string) (prefetch.Resolved, error) {
	return b.opts.Registry.Resolve(ctx, ref)
}

// Pull implements prefetch.Images.
func (b *Backend) Pull(ctx context.Context, r prefetch.Resolved, progress func(prefetch.Progress)) error {
	if progress == nil {
		progress = func(prefetch.Progress) {}
	}
	var err error
	switch b.path {
	case PathParallel, PathWarmd:
		err = b.pullParallel(ctx, r, progress)
	case PathTransfer:
		err = b.pullTransfer(ctx, r, progress)
	default:
		err = b.pullClient(ctx, r, progress)
	}
	if err != nil {
		return err
	}
	if err := b.label(ctx, r.Name); err != nil {
		return err
	}
	l, err := b.Lookup(ctx, r.Name)
	if err != nil {
		return fmt.Errorf("check %s after pull: %w", r.Name, err)
	}
	if l.Digest != r.Target.Digest || !l.Unpacked {
		return fmt.Errorf("after pulling %s: containerd holds %s (unpacked in %s: %v), want %s unpacked",
			r.Name, l.Digest, b.opts.Snapshotter, l.Unpacked, r.Target.Digest)
	}
	return nil
}

// label pins and marks the image; done after the pull on both paths so an image that existed before
// (pulled by the kubelet) is pinned too.
func (b *Backend) label(ctx context.Context, name string) error {
	is := b.client.ImageService()
	img, err := is.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("label %s: %w", name, err)
	}
	if img.Labels == nil {
		img.Labels = map[string]string{}
	}
	img.Labels[prefetch.LabelPinned] = prefetch.PinnedValue
	img.Labels[prefetch.LabelManaged] = "true"
	if _, err := is.Update(ctx, img, "labels."+prefetch.LabelPinned, "labels."+prefetch.LabelManaged); err != nil {
		return fmt.Errorf("pin %s: %w", name, err)
	}
	return nil
}

// Lookup implements prefetch.Images.
func (b *Backend) Lookup(ctx context.Context, name string) (prefetch.Local, error) {
	img, err := b.client.ImageService().Get(ctx, name)
	if errdefs.IsNotFound(err) {
		return prefetch.Local{}, fmt.Errorf("%s: %w", name, prefetch.ErrNotFound)
	}
	if err != nil {
		return prefetch.Local{}, fmt.Errorf("look up %s: %w", name, err)
	}
	return b.local(ctx, img), nil
}

func (b *Backend) local(ctx context.Context, img images.Image) prefetch.Local {
	l := prefetch.Local{
		Name:    img.Name,
		Digest:  img.Target.Digest,
		Pinned:  img.Labels[prefetch.LabelPinned] == prefetch.PinnedValue,
		Managed: img.Labels[prefetch.LabelManaged] == "true",
	}
	ci := client.NewImageWithPlatform(b.client, img, platforms.Only(b.opts.Registry.Platform))
	l.Unpacked, _ = ci.IsUnpacked(ctx, b.opts.Snapshotter)
	return l
}

// Managed implements prefetch.Images.
func (b *Backend) Managed(ctx context.Context) ([]prefetch.Local, error) {
	imgs, err := b.client.ImageService().List(ctx, `labels."`+prefetch.LabelManaged+`"==true`)
	if err != nil {
		return nil, fmt.Errorf("list managed images: %w", err)
	}
	out := make([]prefetch.Local, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, b.local(ctx, img))
	}
	return out, nil
}

// Release implements prefetch.Images.
func (b *Backend) Release(ctx context.Context, name, policy string) error {
	is := b.client.ImageService()
	img, err := is.Get(ctx, name)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release %s: %w", name, err)
	}
	if img.Labels[prefetch.LabelManaged] != "true" {
		return nil // not warmd's: never touched
	}
	switch policy {
	case prefetch.OnRemoveKeep:
		return nil
	case prefetch.OnRemoveUnpin:
		return b.unpin(ctx, img)
	case prefetch.OnRemoveRemove:
		return b.remove(ctx, img)
	}
	return fmt.Errorf("release %s: policy %q is not unpin, keep or remove", name, policy)
}

// refs returns every image record sharing img's target, split into warmd's and the CRI's aliases
// (repo@sha256:… and the sha256:<config> image ID) and foreign names someone else created.
func (b *Backend) refs(ctx context.Context, img images.Image) (ours, aliases, foreign []images.Image, err error) {
	all, err := b.client.ImageService().List(ctx, "target.digest=="+img.Target.Digest.String())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list refs of %s: %w", img.Target.Digest, err)
	}
	for _, o := range all {
		switch {
		case o.Labels[prefetch.LabelManaged] == "true":
			ours = append(ours, o)
		case isAlias(o.Name):
			aliases = append(aliases, o)
		default:
			foreign = append(foreign, o)
		}
	}
	return ours, aliases, foreign, nil
}

func (b *Backend) unpin(ctx context.Context, img images.Image) error {
	ours, aliases, foreign, err := b.refs(ctx, img)
	if err != nil {
		return err
	}
	touch := []images.Image{img}
	if len(foreign) == 0 && len(ours) <= 1 {
		touch = append(touch, aliases...) // the CRI may have copied the pin onto its aliases
	}
	is := b.client.ImageService()
	for _, o := range touch {
		if _, ok := o.Labels[prefetch.LabelPinned]; !ok && o.Name != img.Name {
			continue
		}
		delete(o.Labels, prefetch.LabelPinned)
		delete(o.Labels, prefetch.LabelManaged)
		if _, err := is.Update(ctx, o, "labels."+prefetch.LabelPinned, "labels."+prefetch.LabelManaged); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("unpin %s: %w", o.Name, err)
		}
	}
	return nil
}

func (b *Backend) remove(ctx context.Context, img images.Image) error {
	ours, aliases, foreign, err := b.refs(ctx, img)
	if err != nil {
		return err
	}
	del := []images.Image{img}
	whole := len(foreign) == 0 && len(ours) <= 1
	if whole {
		del = append(del, aliases...)
	}
	if err := b.deleteAll(ctx, del); err != nil {
		return err
	}
	if !whole {
		return nil
	}
	// The CRI adds its aliases asynchronously after it sees an image; one created while we deleted
	// would keep the content alive, so look once more.
	_, late, _, err := b.refs(ctx, img)
	if err != nil {
		return err
	}
	return b.deleteAll(ctx, late)
}

// deleteAll deletes the named images, the last one synchronously so content and snapshots are
// collected before returning.
func (b *Backend) deleteAll(ctx context.Context, del []images.Image) error {
	is := b.client.ImageService()
	var errs []error
	for i, o := range del {
		var opts []images.DeleteOpt
		if i == len(del)-1 {
			opts = append(opts, images.SynchronousDelete())
		}
		if err := is.Delete(ctx, o.Name, opts...); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", o.Name, err))
		}
	}
	return errors.Join(errs...)
}

// isAlias recognizes the names the CRI plugin adds for an image: its ID (sha256:<config digest>) and
// its repo digest (repo@sha256:…).
func isAlias(name string) bool {
	return (len(name) == len("sha256:")+64 && strings.HasPrefix(name, "sha256:")) || strings.Contains(name, "@sha256:")
}

// platformOf returns the node platform as an OCI platform (for the transfer image store).
func (b *Backend) platformOf() ocispec.Platform { return b.opts.Registry.Platform }
