package containerd

import (
	"context"
	"fmt"
	"sync"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/transfer"
	"github.com/containerd/containerd/v2/core/transfer/image"
	"github.com/containerd/containerd/v2/core/transfer/registry"
	"github.com/containerd/platforms"
	digest "github.com/opencontainers/go-digest"

	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/oci"
)

func pullLabels() map[string]string {
	return map[string]string{prefetch.LabelPinned: prefetch.PinnedValue, prefetch.LabelManaged: "true"}
}

// pullTransfer has the daemon fetch repo@digest and store it under r.Name, unpacked for the node's
// platform. Credentials travel back to this process over the transfer stream, so secrets never
// reach containerd's config.
func (b *Backend) pullTransfer(ctx context.Context, r prefetch.Resolved, progress func(prefetch.Progress)) error {
	pr, err := oci.ParseRef(r.Name)
	if err != nil {
		return err
	}
	src := pr.Repo + "@" + r.Target.Digest.String()
	ropts := []registry.Opt{registry.WithCredentials(credHelper{b.opts.Registry.Auth})}
	if dir := b.opts.Registry.HostsDirIfPresent(); dir != "" {
		ropts = append(ropts, registry.WithHostDir(dir))
	}
	if s := b.opts.Registry.DefaultScheme(pr.Host); s != "" {
		ropts = append(ropts, registry.WithDefaultScheme(s))
	}
	reg, err := registry.NewOCIRegistry(ctx, src, ropts...)
	if err != nil {
		return fmt.Errorf("transfer source %s: %w", src, err)
	}
	p := b.platformOf()
	dst := image.NewStore(r.Name,
		image.WithPlatforms(p),
		image.WithManifestLimit(1),
		image.WithUnpack(p, b.opts.Snapshotter),
		image.WithImageLabels(pullLabels()))
	tr := newTracker(r, progress)
	err = b.client.Transfer(ctx, reg, dst, transfer.WithProgress(func(ev transfer.Progress) {
		if ev.Desc == nil {
			return
		}
		switch ev.Event {
		case "complete", "already exists", "extracting", "extracted":
			tr.set(ev.Desc.Digest, ev.Total, true)
		default:
			tr.set(ev.Desc.Digest, ev.Progress, false)
		}
	}))
	if err != nil {
		return fmt.Errorf("transfer %s from %s: %w", r.Name, src, err)
	}
	return nil
}

// pullClient is the containerd 1.6 path: the client fetches through the daemon's content store and
// unpacks through its snapshot and diff services; progress comes from polling ListStatuses.
func (b *Backend) pullClient(ctx context.Context, r prefetch.Resolved, progress func(prefetch.Progress)) error {
	pr, err := oci.ParseRef(r.Name)
	if err != nil {
		return err
	}
	res := oci.FixedResolver(b.opts.Registry.Resolver(ctx, pr.Host), r.Name, r.Target)
	tr := newTracker(r, progress)
	pollCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { b.poll(pollCtx, tr) })
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

// poll reads the content store's in-flight writes (ListStatuses) and committed blobs (Info) until
// ctx ends, feeding the tracker.
func (b *Backend) poll(ctx context.Context, tr *tracker) {
	cs := b.client.ContentStore()
	t := time.NewTicker(b.opts.PollInterval)
	defer t.Stop()
	for {
		statuses, err := cs.ListStatuses(ctx)
		if err == nil {
			for _, st := range statuses {
				if st.Expected != "" {
					tr.set(st.Expected, st.Offset, false)
				}
			}
		}
		for _, d := range tr.pending() {
			if _, err := cs.Info(ctx, d); err == nil {
				tr.set(d, -1, true)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tracker folds backend events into prefetch.Progress snapshots.
type tracker struct {
	mu     sync.Mutex
	index  map[digest.Digest]int
	layers []prefetch.LayerProgress
	fn     func(prefetch.Progress)
}

func newTracker(r prefetch.Resolved, fn func(prefetch.Progress)) *tracker {
	t := &tracker{index: map[digest.Digest]int{}, fn: fn}
	for i, l := range r.Layers {
		t.index[l.Digest] = i
		t.layers = append(t.layers, prefetch.LayerProgress{Digest: l.Digest, Size: l.Size})
	}
	return t
}

// set records done bytes (-1: unchanged) for a layer; non-layer descriptors are ignored.
func (t *tracker) set(d digest.Digest, done int64, complete bool) {
	t.mu.Lock()
	i, ok := t.index[d]
	if !ok {
		t.mu.Unlock()
		return
	}
	l := &t.layers[i]
	if l.Complete || (!complete && done <= l.Done) {
		t.mu.Unlock()
		return
	}
	if complete {
		l.Complete, l.Done = true, l.Size
	} else if done >= 0 {
		l.Done = min(done, l.Size)
	}
	p := prefetch.Progress{Phase: prefetch.StatePulling, Layers: append([]prefetch.LayerProgress(nil), t.layers...)}
	all := true
	for _, l := range t.layers {
		all = all && l.Complete
	}
	if all {
		p.Phase = prefetch.StateUnpacking
	}
	t.mu.Unlock()
	t.fn(p)
}

func (t *tracker) pending() []digest.Digest {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []digest.Digest
	for _, l := range t.layers {
		if !l.Complete {
			out = append(out, l.Digest)
		}
	}
	return out
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
