package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/cache/bundle"
)

var _ api.CacheService = (*Part)(nil)

// ImportBundle implements api.CacheService: `warmd cache import` while the daemon runs. The bundle is
// imported by the daemon's own manager and recorded as imported, so its files are known to capture
// and never bundled or uploaded again as this node's.
func (p *Part) ImportBundle(ctx context.Context, r io.Reader, component string) (api.CacheImport, error) {
	mgr, err := p.ready()
	if err != nil {
		return api.CacheImport{}, err
	}
	if !validComponent(component) {
		return api.CacheImport{}, fmt.Errorf("%w: component is not one of %v", api.ErrCacheRefused, Components)
	}
	res, err := mgr.ImportFrom(ctx, r, component)
	p.publishMgr(mgr, "ready")
	if err != nil {
		return api.CacheImport{}, classify(err)
	}
	p.log.Info("imported compile-cache bundle", "bundle", res.Record.SHA256[:12], "component", component, "written", res.Written)
	return api.CacheImport{SHA256: res.Record.SHA256, Component: component, Entries: len(res.Record.Manifest.Entries),
		Written: res.Written, Existing: res.Existing, Conflicts: res.Conflicts}, nil
}

// SyncCache implements api.CacheService: `warmd cache pull|push` while the daemon runs.
func (p *Part) SyncCache(ctx context.Context, op string) (api.CacheSync, error) {
	mgr, err := p.ready()
	if err != nil {
		return api.CacheSync{}, err
	}
	if mgr.share == nil {
		return api.CacheSync{}, fmt.Errorf("%w: compileCache.remote is not set; there is no bucket to %s", api.ErrCacheRefused, op)
	}
	start := time.Now()
	res := api.CacheSync{Op: op}
	defer p.publishMgr(mgr, "ready")
	switch op {
	case "pull":
		r, err := mgr.Restore(ctx)
		if err != nil {
			return res, err
		}
		res.Restored, res.Remote, res.Refused = len(r.Restored), r.Remote, r.Refused
	case "push":
		c, err := mgr.Capture(ctx)
		if err != nil {
			return res, err
		}
		n, err := mgr.Upload(ctx)
		res.Captured, res.Pending, res.Uploaded = len(c.Bundles), c.Pending, n
		if err != nil {
			return res, err
		}
	default:
		return res, fmt.Errorf("%w: op is neither pull nor push", api.ErrCacheRefused)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// ready returns the running manager, or ErrCacheNotReady while the part waits for a SKU.
func (p *Part) ready() (*Manager, error) {
	if mgr := p.Manager(); mgr != nil {
		return mgr, nil
	}
	return nil, fmt.Errorf("%w: the daemon's compile caches are waiting for a cacheable GPU SKU (see `warmd status`)", api.ErrCacheNotReady)
}

// classify marks what the bundle's content caused as refused (422); the rest stays a failure (500).
func classify(err error) error {
	for _, e := range []error{bundle.ErrCorrupt, bundle.ErrUnsafe, bundle.ErrTooLarge, bundle.ErrRejected, bundle.ErrNoSpace, ErrOtherSKU} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", api.ErrCacheRefused, err)
		}
	}
	return err
}
