package follow

import (
	"errors"
	"path/filepath"

	"github.com/fsnotify/fsnotify"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
)

var (
	_ daemon.Part           = (*Follower)(nil)
	_ daemon.Reconfigurable = (*Follower)(nil)
)

// PartOptions are what the assembly injects: pkg/nvml knows the SKU, Models the configured names,
// pkg/phases/follow/kube.Source.Lookup knows pods when an API server is configured; any may be nil.
type PartOptions struct {
	SKU       func() string
	Models    *Models
	Container ContainerInfoFunc
}

// NewPart returns the phases daemon part: a Follower of the config's pod log dir that keeps its
// records under the data dir and follows reloads (pod log dir, keep, model names through Models).
func NewPart(d daemon.Deps, o PartOptions) (*Follower, error) {
	opts := partOptions(d.Config)
	opts.SKU, opts.Container, opts.Store = o.SKU, o.Container, d.Store
	if o.Models != nil {
		opts.Model = o.Models.Name
	}
	if d.Metrics != nil {
		opts.Metrics = d.Metrics.Phases
	}
	if d.Log != nil {
		opts.Log = d.Log.With("part", "phases")
	}
	return New(opts)
}

// partOptions are the parts of Options a config decides.
func partOptions(c *config.NodeConfig) Options {
	return Options{Dir: c.Phases.PodLogDir, StateDir: filepath.Join(c.DataDir, "state"), Keep: c.Phases.Keep}
}

// Ready implements daemon.Part: nil once the pod log dir has been scanned once (an unreadable dir
// counts: the status section says why).
func (f *Follower) Ready() error {
	if !f.scanned.Load() {
		return errors.New("first scan of the pod log dir not done")
	}
	return nil
}

// Reconfigure implements daemon.Reconfigurable: Run applies a new pod log dir (following the new dir
// from scratch) and keep; model names follow through the Models the part was built with.
func (f *Follower) Reconfigure(cfg *config.NodeConfig) {
	o := partOptions(cfg)
	f.mu.Lock()
	f.pending = &o
	f.mu.Unlock()
	select {
	case f.reconf <- struct{}{}:
	default:
	}
}

// applyPending applies a reconfigure on Run's goroutine, which alone touches streams and watches.
func (f *Follower) applyPending(w *fsnotify.Watcher) {
	f.mu.Lock()
	o := f.pending
	f.pending = nil
	if o != nil && o.Keep > 0 {
		f.opts.Keep = o.Keep
	}
	f.mu.Unlock()
	if o == nil || o.Dir == f.opts.Dir {
		return
	}
	f.log.Info("following another pod log dir", "from", f.opts.Dir, "to", o.Dir)
	for k, s := range f.streams {
		s.close()
		delete(f.streams, k)
	}
	for dir := range f.watched {
		if w != nil {
			_ = w.Remove(dir)
		}
		delete(f.watched, dir)
	}
	f.problem = ""
	f.opts.Dir = o.Dir
}
