package containerd

import (
	"context"
	"fmt"
	"sync"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/transfer"
	"github.com/containerd/containerd/v2/core/transfer/image"
	"github.com/containerd/containerd/v2/core/transfer/registry"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"

	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/oci"
)

func pullLabels() map[string]string {
	return map[string]string{prefetch.LabelPinned: prefetch.PinnedValue, prefetch.LabelManaged: "true"}
}

// pullTransfer has the daemon fetch repo@digest and store it under r.Name, unpacked for the node's
// platform. Credentials travel back to this process over the transfer stream, so secrets never
// reach containerd's config.
func (b *Backend) pullTransfer(ctx context.Context, r prefetch.Resolved, progress func(prefetch.Progress)) error {
	tr := oci.NewTracker(r, progress)
	ctx, done, err := b.peerPhase(ctx, r, tr)
	if err != nil {
		return err
	}
	defer done()
	reg, err := b.transferSource(ctx, r)
	if err != nil {
		return err
	}
	p := b.platformOf()
	dst := image.NewStore(r.Name,
		image.WithPlatforms(p),
		image.WithManifestLimit(1),
		image.WithUnpack(p, b.opts.Snapshotter),
		image.WithImageLabels(pullLabels()))
	err = b.client.Transfer(ctx, reg, dst, transfer.WithProgress(func(ev transfer.Progress) {
		if ev.Desc == nil {
			return
		}
		switch ev.Event {
		case "complete", "already exists", "extracting", "extracted":
			tr.Set(ev.Desc.Digest, ev.Total, true)
		default:
			tr.Set(ev.Desc.Digest, ev.Progress, false)
		}
	}))
	if err != nil {
		return fmt.Errorf("transfer %s: %w", r.Name, err)
	}
	return nil
}

// transferSource is the daemon-side registry source for repo@digest: credentials travel back to
// this process over the transfer stream, so secrets never reach containerd's config.
func (b *Backend) transferSource(ctx context.Context, r prefetch.Resolved) (*registry.OCIRegistry, error) {
	pr, err := oci.ParseRef(r.Name)
	if err != nil {
		return nil, err
	}
	src := pr.Repo + "@" + r.Target.Digest.String()
	ropts := []registry.Opt{registry.WithCredentials(credHelper{b.opts.Registry.Auth})}
	// The daemon reads the hosts dir from its own filesystem, so pass it even when warmd's container
	// does not mount it (containerd ignores a dir that does not exist).
	if dir := b.opts.Registry.HostsDir; dir != "" {
		ropts = append(ropts, registry.WithHostDir(dir))
	}
	if s := b.opts.Registry.DefaultScheme(pr.Host); s != "" {
		ropts = append(ropts, registry.WithDefaultScheme(s))
	}
	reg, err := registry.NewOCIRegistry(ctx, src, ropts...)
	if err != nil {
		return nil, fmt.Errorf("transfer source %s: %w", src, err)
	}
	return reg, nil
}

// pullClient is the containerd 1.6 path: the client fetches through the daemon's content store and
// unpacks through its snapshot and diff services; progress comes from polling ListStatuses.
func (b *Backend) pullClient(ctx context.Context, r prefetch.Resolved, progress func(prefetch.Progress)) error {
	pr, err := oci.ParseRef(r.Name)
	if err != nil {
		return err
	}
	tr := oci.NewTracker(r, progress)
	ctx, done, err := b.peerPhase(ctx, r, tr)
	if err != nil {
		return err
	}
	defer done()
	res := oci.FixedResolver(b.opts.Registry.Resolver(ctx, pr.Host), r.Name, r.Target)
	pollCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { oci.PollContent(pollCtx, b.client.ContentStore(), tr, b.opts.PollInterval) })
	_, err = b.client.Pull(ctx, r.Name,
		client.WithResolver(res),
		client.WithPullUnpack,
		client.WithPullSnapshotter(b.opts.Snapshotter),
		client.WithPlatformMatcher(platforms.Only(b.platformOf())),
		client.WithPullLabels(pullLabels()),
		client.WithMaxConcurrentDownloads(b.opts.MaxConcurrentDownloads))
	stop()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("pull %s: %w", r.Name, err)
	}
	return nil
}

// credHelper answers the daemon's credential callbacks from warmd's auth files.
type credHelper struct{ auth oci.Auth }

func (c credHelper) GetCredentials(_ context.Context, _, host string) (registry.Credentials, error) {
	u, s, err := c.auth.Credentials(host)
	if err != nil {
		return registry.Credentials{}, err
	}
	return registry.Credentials{Host: host, Username: u, Secret: s}, nil
}

// peerPhase, when peers may hold r's layers (peersFor), takes under a lease (returned in ctx,
// ended by done) the manifest, the config and the layers they hold into the content store before
// the daemon pulls: the daemon then finds them there and fetches only the rest from the registry.
// Otherwise it changes nothing and does no work. tr hears of the layers' progress from peers.
func (b *Backend) peerPhase(ctx context.Context, r prefetch.Resolved, tr *oci.Tracker) (context.Context, func(), error) {
	peers := b.peersFor(ctx, r)
	if len(peers) == 0 {
		return ctx, func() {}, nil
	}
	pr, err := oci.ParseRef(r.Name)
	if err != nil {
		return ctx, nil, err
	}
	ctx, end, err := b.client.WithLease(ctx)
	if err != nil {
		return ctx, nil, fmt.Errorf("lease for %s: %w", r.Name, err)
	}
	done := func() { _ = end(context.WithoutCancel(ctx)) }
	fetcher, err := b.opts.Registry.Resolver(ctx, pr.Host).Fetcher(ctx, r.Name)
	if err != nil {
		done()
		return ctx, nil, fmt.Errorf("fetcher for %s: %w", r.Name, err)
	}
	manifest, _, err := b.fetchMeta(ctx, r, fetcher)
	if err != nil {
		done()
		return ctx, nil, err
	}
	b.fromPeers(ctx, r, peers, manifest.Layers, tr, func(digest.Digest) {})
	return ctx, done, nil
}
