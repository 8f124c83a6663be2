// Package follow is the daemon side of startup measurement: it finds vLLM containers in the kubelet's
// pod log dir (/var/log/pods/<ns>_<pod>_<uid>/<container>/<N>.log), follows their logs with fsnotify
// (new pods, container restarts, log rotation) backed by a periodic rescan, parses each start with
// pkg/phases, keeps the last N records under the data dir, publishes them as the phases status section
// and observes the startup metrics.
//
// It does not parse (pkg/phases does), detect GPUs (the SKU comes from an injected func) or decide
// what is warm (readiness reads the records).
package follow

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/state"
)

// ModelFunc maps a start to the model name used as a metric label (keep it bounded: a configured
// model name, not a path). ns/pod identify the pod; r.Model is what vLLM printed.
type ModelFunc func(namespace, pod string, r phases.Result) string

// ContainerRef names one container start, as the pod log dir does.
type ContainerRef struct {
	Namespace, Pod, PodUID, Container string
	Restart                           int
}

// ContainerInfo is what the node (API server, runtime) knows about a start beyond its log. Zero
// fields are unknown.
type ContainerInfo struct {
	Image string
	// Started is when the runtime started the container (the process start).
	Started time.Time
	// PullStart and PullEnd bound the image pull the kubelet reported (its Pulled event).
	PullStart, PullEnd time.Time
}

// ContainerInfoFunc looks a start up; an error only means the record goes without the extras.
type ContainerInfoFunc func(ctx context.Context, ref ContainerRef) (ContainerInfo, error)

// Options configure a Follower.
type Options struct {
	// Dir is the kubelet's pod log dir (config phases.podLogDir).
	Dir string
	// StateDir keeps the records file (<dataDir>/state).
	StateDir string
	// Keep is how many records are kept (config phases.keep).
	Keep int
	// SKU returns this node's GPU SKU key; nil or "" leaves the label empty.
	SKU func() string
	// Model resolves the model label; nil uses what vLLM printed.
	Model ModelFunc
	// Container adds the image, container start and image pull to a record (pkg/phases/follow/kube
	// reads them from the API server); nil records what the log says alone.
	Container ContainerInfoFunc
	Store     *state.Store
	Metrics   *metrics.Phases
	Log       *slog.Logger
	// Resync is the full rescan interval that backs up fsnotify. Default 5s.
	Resync time.Duration
	// Settle is how long a start that reached ready waits for its first /health 200 (and a failed one
	// for the rest of its traceback) before it is recorded. Default 60s; negative records at once.
	Settle time.Duration
	// ProbeLines is how many lines a container may print without a vLLM marker before it is ignored.
	// Default 5000.
	ProbeLines int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Follower follows vLLM container logs on this node. Use New; Run or Sync drive it.
type Follower struct {
	opts    Options
	log     *slog.Logger
	mu      sync.Mutex // guards records (read by Records from other goroutines)
	records []phases.Record
	keys    map[string]bool // recorded start keys
	streams map[string]*stream
	watched map[string]bool
	problem string
	// published summarises the last published status, to publish only changes.
	published string
	ctx       context.Context // Run's, for lookups; Background under Sync
	scanned   atomic.Bool     // the first scan is done (Ready)
	pending   *Options        // a reconfigure Run has yet to apply (guarded by mu)
	reconf    chan struct{}
}

var logName = regexp.MustCompile(`^(\d+)\.log$`)

// podRef names a container from its log dir.
type podRef struct {
	namespace, name, uid, container string
	dir                             string // .../<ns>_<pod>_<uid>/<container>
}

// New loads the kept records and returns a follower; it reads nothing from the pod log dir yet.
func New(opts Options) (*Follower, error) {
	if opts.Dir == "" || opts.StateDir == "" {
		return nil, fmt.Errorf("phases follower: set both the pod log dir (phases.podLogDir) and the state dir")
	}
	if opts.Keep <= 0 {
		opts.Keep = 200
	}
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Second
	}
	if opts.Settle < 0 {
		opts.Settle = 0
	} else if opts.Settle == 0 {
		opts.Settle = 60 * time.Second
	}
	if opts.ProbeLines <= 0 {
		opts.ProbeLines = 5000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	f := &Follower{opts: opts, log: opts.Log, ctx: context.Background(), keys: map[string]bool{}, streams: map[string]*stream{}, watched: map[string]bool{},
		reconf: make(chan struct{}, 1)}
	recs, err := loadRecords(f.recordsPath())
	if err != nil {
		// A corrupt file must not stop the daemon: start empty, say so, and overwrite it on the next record.
		f.problem = err.Error()
		f.log.Warn("phases records unreadable; starting empty", "err", err)
	}
	f.records = recs
	if n, err := sweepRecordTemps(f.recordsPath()); err != nil {
		f.log.Warn("could not remove temp files of interrupted phases record writes", "err", err)
	} else if n > 0 {
		f.log.Info("removed temp files of interrupted phases record writes", "files", n)
	}
	for i := range recs {
		f.keys[recs[i].Key()] = true
	}
	return f, nil
}

// Name is the part's name.
func (f *Follower) Name() string { return "phases" }

// Records returns the kept records, oldest first.
func (f *Follower) Records() []phases.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]phases.Record(nil), f.records...)
}

// Run follows the pod log dir until ctx ends.
func (f *Follower) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		f.log.Warn("fsnotify unavailable; polling the pod log dir only", "err", err, "every", f.opts.Resync)
	} else {
		defer w.Close()
	}
	f.ctx = ctx
	f.sync(w)
	f.scanned.Store(true)
	tick := time.NewTicker(f.opts.Resync)
	defer tick.Stop()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	for {
		select {
		case <-ctx.Done():
			for _, s := range f.streams {
				s.close()
			}
			return nil
		case <-tick.C:
			f.sync(w)
		case <-f.reconf:
			f.applyPending(w)
			f.sync(w)
		case ev := <-events:
			if ev.Has(fsnotify.Write) && !ev.Has(fsnotify.Create) {
				if s := f.streamAt(ev.Name); s != nil {
					if !s.done {
						f.pollStream(s)
						f.publish()
					}
					continue
				}
			}
			f.sync(w)
		case err := <-errs:
			f.log.Warn("fsnotify", "err", err) // overflow etc.: the next rescan catches up
			f.sync(w)
		}
	}
}

// Sync does one rescan-and-read pass; Run calls it on every tick and directory event. Tests call it
// directly to step the follower.
func (f *Follower) Sync() { f.sync(nil) }

func (f *Follower) streamAt(path string) *stream {
	for _, s := range f.streams {
		if s.path == path {
			return s
		}
	}
	return nil
}

func (f *Follower) sync(w *fsnotify.Watcher) {
	f.watch(w, f.opts.Dir)
	seen := map[string]bool{}
	podDirs, err := os.ReadDir(f.opts.Dir)
	if err != nil {
		f.problem = fmt.Sprintf("read pod log dir %s: %v (set phases.podLogDir to the kubelet's pod log dir and mount it)", f.opts.Dir, err)
	} else if strings.HasPrefix(f.problem, "read pod log dir") {
		f.problem = ""
	}
	for _, pd := range podDirs {
		parts := strings.Split(pd.Name(), "_")
		if !pd.IsDir() || len(parts) != 3 {
			continue
		}
		podDir := filepath.Join(f.opts.Dir, pd.Name())
		f.watch(w, podDir)
		containers, _ := os.ReadDir(podDir)
		for _, c := range containers {
			if !c.IsDir() {
				continue
			}
			ref := podRef{namespace: parts[0], name: parts[1], uid: parts[2], container: c.Name(), dir: filepath.Join(podDir, c.Name())}
			f.watch(w, ref.dir)
			f.syncContainer(ref, seen)
		}
	}
	// Pods that are gone: what was read is all there will be.
	for k, s := range f.streams {
		if !seen[k] {
			f.pollStream(s)
			f.finish(s)
			delete(f.streams, k)
		}
	}
	f.publish()
}

func (f *Follower) syncContainer(ref podRef, seen map[string]bool) {
	files, _ := os.ReadDir(ref.dir)
	latest := -1
	var restarts []int
	for _, fi := range files {
		if m := logName.FindStringSubmatch(fi.Name()); m != nil {
			n, err := strconv.Atoi(m[1])
			if err == nil {
				restarts = append(restarts, n)
				latest = max(latest, n)
			}
		}
	}
	for _, n := range restarts {
		key := phases.StartKey(ref.namespace, ref.name, ref.uid, ref.container, n)
		seen[key] = true
		if f.keys[key] {
			continue
		}
		s := f.streams[key]
		if s == nil {
			s = &stream{pod: ref, restart: n, path: filepath.Join(ref.dir, fmt.Sprintf("%d.log", n)),
				parser: phases.NewParser(phases.Options{Source: filepath.Join(ref.dir, fmt.Sprintf("%d.log", n)), Reference: f.opts.Now()})}
			f.streams[key] = s
			if err := s.open(); err != nil {
				f.log.Warn("open container log", "err", err)
			}
		}
		f.pollStream(s)
		if n < latest { // the container restarted: this start is over
			f.finish(s)
		}
	}
}

func (f *Follower) watch(w *fsnotify.Watcher, dir string) {
	if w == nil || f.watched[dir] {
		return
	}
	if err := w.Add(dir); err == nil {
		f.watched[dir] = true
	}
}

// pollStream reads new lines and records the start once it has settled.
func (f *Follower) pollStream(s *stream) {
	if s.done {
		return
	}
	if err := s.poll(); err != nil {
		f.log.Warn("follow container log", "err", err)
	}
	if !s.parser.IsVLLM() {
		if s.parser.Lines() > f.opts.ProbeLines {
			s.done = true // not vLLM: stop reading it
			s.close()
		}
		return
	}
	r := s.parser.Result()
	if r.Outcome == phases.OutcomeIncomplete {
		return
	}
	now := f.opts.Now()
	if s.terminalAt.IsZero() {
		s.terminalAt = now
	}
	_, health := r.Phase(phases.PhaseFirstHealth)
	if health || now.Sub(s.terminalAt) >= f.opts.Settle {
		f.record(s, r)
	}
}

// finish records a start whose log has ended, whatever it reached.
func (f *Follower) finish(s *stream) {
	if s.done {
		return
	}
	s.close()
	if s.parser.IsVLLM() {
		f.record(s, s.parser.Result())
	}
	s.done = true
}
