// Package weights is warmd's weight-prefetch engine and daemon part. The engine lists a model's files
// from a prefetch.Source, downloads them with parallel ranged GETs within and across files into
// preallocated files under <dataDir>/weights/.staging (streaming through a small shared buffer pool,
// so memory stays flat whatever the object sizes), journals finished chunks so a restart resumes,
// verifies every file with the strongest check the source offers, checks the model's layout
// (config.json, safetensors headers, the shard index), and only then publishes it atomically in the
// Hugging Face cache layout <dataDir>/weights/models--<org>--<name>/{blobs,refs,snapshots/<rev>}.
// A disk budget evicts least recently used models no pod uses. The Manager part runs the engine for
// the models this node wants and publishes their status.
//
// Defaults (config.Weights): 16 ranged GETs in flight, 16 MiB chunks. A chunk is the unit of
// parallelism, retry and resume, not of memory (bodies stream through 1 MiB buffers, written with
// O_DIRECT when aligned, so the page cache is neither filled nor a bottleneck). 16 MiB keeps
// the per-request overhead (≈1 RTT + signing) under 1% at S3's ~100 MB/s per connection while a
// 512 MiB file still splits 32 ways; 16 streams saturate loopback/2-core machines (measured: more
// only adds CPU contention with the server). On a 100 Gbit node, where one S3 connection gives
// ~90-100 MB/s, set concurrency to 64-128: memory grows by 1 MiB per stream only.
//
// It owns neither which models a node wants (an injected Wants func) nor which models pods use (an
// injected InUse func).
package weights

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sync"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/hfcache"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/state"
)

// Defaults of Options.
const (
	DefaultConcurrency = 16
	DefaultChunkSize   = 16 << 20
	DefaultBufferSize  = 1 << 20
	DefaultInUseWindow = 10 * time.Minute
)

// ErrDiskFull: the disk ran out of space while staging; staging was cleaned and nothing published.
var ErrDiskFull = errors.New("disk full")

// ErrBudget: the model does not fit the weights budget even after evicting every unused model.
var ErrBudget = errors.New("weights budget exceeded")

// ErrLayout: the model's files are not a loadable model (missing config.json, bad safetensors, missing shards).
var ErrLayout = errors.New("model layout invalid")

// ErrVerify: a file's bytes did not match its checksum even after refetching it.
var ErrVerify = errors.New("verification failed")

// OpenSource opens the source a model's config names.
type OpenSource func(ctx context.Context, m config.Model) (prefetch.Source, error)

// Options configure an Engine.
type Options struct {
	// DataDir is warmd's data dir; weights live in DataDir/weights, records in DataDir/state/weights.
	DataDir string
	// CacheRoot overrides where weights live (the HF_HUB_CACHE dir); default DataDir/weights.
	// `warmd prefetch weights s3://… DIR` uses it to fill DIR directly.
	CacheRoot string
	// Concurrency is the number of ranged GETs in flight across all files. Default 16.
	Concurrency int
	// ChunkSize is the size of one ranged GET. Default 16 MiB.
	ChunkSize int64
	// BufferSize is each worker's copy buffer, hence the size of one direct write. Default 1 MiB
	// (a multiple of the 4 KiB direct-I/O alignment). Buffered writes go out in 128 KiB pieces:
	// concurrent writers to one file serialize on the inode lock per write, and measured on ext4
	// here 1 MiB buffered writes from 16 workers cost 2-3x the kernel time of 128 KiB ones.
	BufferSize int
	// BufferedIO turns off O_DIRECT writes. By default aligned writes bypass the page cache: on
	// the disks measured here a durable (fsynced) buffered write ran at 0.25-0.95 GB/s and a direct
	// one at 1.5-1.6 GB/s, and prefetching 100s of GB must not evict what serving pods cache.
	// Filesystems without O_DIRECT (tmpfs) fall back to buffered writes by themselves.
	BufferedIO bool
	// BandwidthLimit caps download bytes per second; 0: no cap.
	BandwidthLimit int64
	// Budget caps the bytes of published weights; 0: no cap.
	Budget int64
	// InUse reports whether a running pod on this node uses model; nil: none does.
	InUse func(model string) bool
	// InUseWindow: a model used (published, seen in use, or Touched) this recently is not evicted.
	InUseWindow time.Duration
	// ProgressInterval is how often Fetch reports progress. Default 500ms.
	ProgressInterval time.Duration
	// ChunkAttempts bounds refetches of one chunk after the source's own retries. Default 3.
	ChunkAttempts int
	// VerifyAttempts bounds refetches of a file whose bytes fail verification. Default 2.
	VerifyAttempts int
	// Open opens a model's source.
	Open OpenSource
	// OnBytes counts downloaded bytes (metrics); may be nil.
	OnBytes func(n int64)
	Now     func() time.Time
	Log     *slog.Logger
}

// Engine implements prefetch.Weights. One Engine serves every model of a process, sharing its
// buffer pool and bandwidth cap; Fetch calls for different models may run concurrently.
//
// Every file it creates, links, renames or removes is reached through two fsroot Roots — the cache
// root (HF_HUB_CACHE) and the records dir — from validated Paths: listed names are fsroot Paths from
// the source, model dirs and revisions pass pkg/model and fsroot before use, and no link below
// either root is ever followed.
type Engine struct {
	opts  Options
	cache *fsroot.Root // CacheRoot: models--*/ and .staging/
	state *fsroot.Root // DataDir/state/weights: the records
	pool  *bufPool
	bw    *bandwidth
	mu    sync.Mutex // serializes budget decisions and publishing
}

var _ prefetch.Weights = (*Engine)(nil)

// staging is where models are downloaded and snapshots built before they are published.
var staging = fsroot.MustPath(".staging")

// New returns an engine; it creates DataDir/weights (or CacheRoot) and DataDir/state/weights.
func New(opts Options) (*Engine, error) {
	if opts.DataDir == "" {
		return nil, errors.New("weights engine: empty data dir (set dataDir in the config)")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	if opts.BufferSize <= 0 {
		opts.BufferSize = DefaultBufferSize
	}
	opts.BufferSize = (opts.BufferSize + dioAlign - 1) / dioAlign * dioAlign
	if opts.InUseWindow <= 0 {
		opts.InUseWindow = DefaultInUseWindow
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = 500 * time.Millisecond
	}
	if opts.ChunkAttempts <= 0 {
		opts.ChunkAttempts = 3
	}
	if opts.VerifyAttempts <= 0 {
		opts.VerifyAttempts = 2
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.OnBytes == nil {
		opts.OnBytes = func(int64) {}
	}
	if opts.InUse == nil {
		opts.InUse = func(string) bool { return false }
	}
	if opts.Open == nil {
		return nil, errors.New("weights engine: no source opener")
	}
	data, err := fsroot.Open(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("weights engine: %w", err)
	}
	defer data.Close()
	e := &Engine{opts: opts, pool: newBufPool(opts.BufferSize, opts.Concurrency),
		bw: newBandwidth(opts.BandwidthLimit, max(opts.BufferSize, 1<<20))}
	if e.state, err = data.Sub(fsroot.MustPath("state/weights")); err != nil {
		return nil, fmt.Errorf("weights engine: records dir: %w", err)
	}
	// Temps of record writes a crash interrupted (the engine is the dir's one writer, under the data
	// dir lock, and nothing is being written yet).
	if n, err := e.state.RemoveTemps(fsroot.Path{}); err != nil {
		e.Close()
		return nil, fmt.Errorf("weights engine: records dir: %w", err)
	} else if n > 0 {
		opts.Log.Info("removed temp files of interrupted record writes", "files", n)
	}
	if opts.CacheRoot != "" {
		e.cache, err = fsroot.Open(opts.CacheRoot)
	} else {
		e.cache, err = data.Sub(fsroot.MustPath("weights"))
	}
	if err == nil {
		err = e.cache.MkdirAll(staging, 0o755)
	}
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("weights engine: cache root: %w", err)
	}
	return e, nil
}

// Close releases the engine's directory handles. Fetches must have returned.
func (e *Engine) Close() error {
	var errs []error
	for _, r := range []*fsroot.Root{e.cache, e.state} {
		if r != nil {
			errs = append(errs, r.Close())
		}
	}
	return errors.Join(errs...)
}

// CacheRoot is the Hugging Face cache root (HF_HUB_CACHE) the engine publishes into.
func (e *Engine) CacheRoot() string { return e.cache.Dir() }

// ModelDir is the HF cache dir of model (models--<org>--<name>), "" for an invalid model name.
func (e *Engine) ModelDir(model string) string {
	mp, err := pathsFor(model, "main")
	if err != nil {
		return ""
	}
	return e.cache.Name(mp.dir)
}

// ModelDirName is the HF cache dir name of a model id ("org/name" → "models--org--name"); "" for a
// name pkg/model refuses.
func ModelDirName(name string) string {
	d, err := model.DirName(name)
	if err != nil {
		return ""
	}
	return d
}

// SnapshotPath is the dir vLLM loads as --model once the model is published; "" for an invalid
// model name or revision.
func (e *Engine) SnapshotPath(model, revision string) string {
	mp, err := pathsFor(model, revision)
	if err != nil {
		return ""
	}
	return e.cache.Name(mp.snapshot())
}

// modelPaths are the validated places of one model revision below the cache and records roots.
type modelPaths struct {
	name    string
	dir     fsroot.Path // models--org--name
	rev     fsroot.Path // the revision, one component
	staging fsroot.Path // .staging/models--org--name@rev
	record  fsroot.Path // below the records root: models--org--name.json
}

func (mp modelPaths) blobs() fsroot.Path     { return hfcache.Blobs(mp.dir) }
func (mp modelPaths) snapshots() fsroot.Path { return hfcache.Snapshots(mp.dir) }
func (mp modelPaths) snapshot() fsroot.Path  { return hfcache.Snapshot(mp.dir, mp.rev) }
func (mp modelPaths) ref() fsroot.Path       { return hfcache.Ref(mp.dir, mp.rev) }

// pathsFor validates a model name and revision itself — whoever called (config validation is one
// caller, not the only one) — and returns where they live. A revision is one path component: an
// unsafe one would otherwise become snapshots/<rev> and refs/<rev>.
func pathsFor(name, revision string) (modelPaths, error) {
	dir, err := model.DirName(name)
	if err != nil {
		return modelPaths{}, fmt.Errorf("%w (fix the model's name in the config)", err)
	}
	if err := model.ValidateRevision(revision); err != nil {
		return modelPaths{}, fmt.Errorf("model %s: %w (fix the model's revision in the config)", name, err)
	}
	mp := modelPaths{name: name}
	if mp.dir, err = hfcache.ModelDir(name); err != nil {
		return modelPaths{}, fmt.Errorf("model %s: %w", name, err)
	}
	if mp.rev, err = (fsroot.Path{}).Child(revision); err != nil {
		return modelPaths{}, fmt.Errorf("model %s: revision: %w", name, err)
	}
	st := dir + "@" + revision
	if len(st) > fsroot.MaxComponentLen {
		sum := sha256.Sum256([]byte(revision))
		st = dir + "@" + hex.EncodeToString(sum[:16])
	}
	if mp.staging, err = staging.Child(st); err != nil {
		return modelPaths{}, fmt.Errorf("model %s: staging dir: %w", name, err)
	}
	if mp.record, err = (fsroot.Path{}).Child(dir + ".json"); err != nil {
		return modelPaths{}, fmt.Errorf("model %s: record: %w", name, err)
	}
	return mp, nil
}

// BandwidthAccounting reports what the bandwidth cap admitted and the total delay it imposed.
func (e *Engine) BandwidthAccounting() (admitted int64, delayed time.Duration) {
	if e.bw == nil {
		return 0, 0
	}
	return e.bw.admitted.Load(), time.Duration(e.bw.delayed.Load())
}

// selectFiles applies the model's include/exclude globs (matched against the relative name and its
// base name, so "*.safetensors" works at any depth).
func selectFiles(m config.Model, name string) bool {
	match := func(globs []string) bool {
		for _, g := range globs {
			if ok, _ := path.Match(g, name); ok {
				return true
			}
			if ok, _ := path.Match(g, path.Base(name)); ok {
				return true
			}
		}
		return false
	}
	if len(m.Include) > 0 && !match(m.Include) {
		return false
	}
	return !match(m.Exclude)
}

// Fetch implements prefetch.Weights.
func (e *Engine) Fetch(ctx context.Context, m config.Model, progress func(prefetch.ModelStatus)) (_ prefetch.ModelStatus, fetchErr error) {
	if m.Revision == "" {
		m.Revision = "main"
	}
	if progress == nil {
		progress = func(prefetch.ModelStatus) {}
	}
	st := prefetch.ModelStatus{Model: m.Name, Revision: m.Revision, Source: m.Source, State: prefetch.StateQueued,
		CacheRoot: e.CacheRoot(), Started: e.opts.Now().UTC()}
	fail := func(err error) (prefetch.ModelStatus, error) {
		st.State, st.Reason, st.Finished = prefetch.StateFailed, state.Reason(err), e.opts.Now().UTC()
		st.BytesPerSecond, st.ETASeconds = 0, 0
		progress(st)
		return st, err
	}
	progress(st)
	e.pool.enter()
	defer e.pool.leave()
	mp, err := pathsFor(m.Name, m.Revision)
	if err != nil {
		return fail(err)
	}
	src, err := e.opts.Open(ctx, m)
	if err != nil {
		return fail(fmt.Errorf("model %s: %w", m.Name, err))
	}
	if fe, ok := src.(prefetch.FetchEnder); ok { // it holds something for this fetch (the peer source: its seed Lease)
		defer func() { fe.EndFetch(fetchErr) }()
	}
	listing, err := src.List(ctx)
	if err != nil {
		return fail(fmt.Errorf("model %s: list %s: %w", m.Name, src, err))
	}
	if len(listing.Skipped) > 0 {
		st.Skipped = listing.Skipped
		e.opts.Log.Warn("source entries skipped", "model", m.Name, "source", src.String(), "skipped", listing.Skipped)
	}
	var files []stagedFile
	for _, lf := range listing.Files {
		if selectFiles(m, lf.Key) {
			files = append(files, stagedFile{obj: lf.Object, name: lf.Name})
			st.BytesTotal += lf.Size
		}
	}
	if len(files) == 0 {
		return fail(fmt.Errorf("model %s: %w: no files under %s match include %v / exclude %v; check source and globs", m.Name, ErrLayout, src, m.Include, m.Exclude))
	}
	if err := e.checkLinks(mp, files); err != nil {
		return fail(fmt.Errorf("model %s: %w", m.Name, err))
	}
	if cur, ok := e.current(m, files); ok {
		// Already verified and published, and the source has not changed: nothing to fetch.
		if err := e.cache.RemoveAll(mp.staging); err != nil {
			e.opts.Log.Warn("could not clean stale staging", "model", m.Name, "err", err)
		}
		cur.Skipped = st.Skipped
		progress(cur)
		return cur, nil
	}
	if err := e.makeRoom(m, st.BytesTotal); err != nil {
		return fail(err)
	}
	f := &fetch{e: e, m: m, mp: mp, src: src, files: files, status: st, progress: progress}
	st, err = f.run(ctx)
	if err != nil {
		return fail(err)
	}
	return st, nil
}

// current returns the published status of m when its snapshot checks out and holds exactly the
// listed files (same names and sizes).
func (e *Engine) current(m config.Model, files []stagedFile) (prefetch.ModelStatus, bool) {
	st, err := e.Check(m)
	if err != nil || len(st.Files) != len(files) {
		return st, false
	}
	sizes := map[string]int64{}
	for _, fv := range st.Files {
		sizes[fv.Name] = fv.Size
	}
	for _, sf := range files {
		if sz, ok := sizes[sf.obj.Key]; !ok || sz != sf.obj.Size {
			return st, false
		}
	}
	return st, true
}
