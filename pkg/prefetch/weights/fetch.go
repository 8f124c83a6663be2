package weights

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
)

// stagedFile is one file being fetched: its listing and its preallocated staging file.
type stagedFile struct {
	obj    objstore.Object
	name   fsroot.Path // obj.Key, validated by the source: the file's path in the snapshot
	data   fsroot.Path // the staging file below the cache root (.staging/<model>@<rev>/data/<i>)
	fh     *os.File
	direct *os.File // O_DIRECT descriptor for aligned writes; nil when off or unsupported
	// streamAlg is the store's full-object CRC algorithm for this file, when it has one that
	// combines: each chunk's CRC is then computed as it streams and journaled, and the file is
	// verified by combining them instead of reading it back.
	streamAlg string
	// pieces are the file's parts when the origin keeps part checksums and peers may be served
	// (pieces.go); nil: the file is verified whole only.
	pieces *pieceSet
}

// fetch is one model's download, verification and publish.
type fetch struct {
	e        *Engine
	m        config.Model
	mp       modelPaths
	src      prefetch.Source
	files    []stagedFile
	j        *journal
	done     atomic.Int64
	mu       sync.Mutex
	status   prefetch.ModelStatus
	progress func(prefetch.ModelStatus)
	// early holds what verifying a file as it completed found (early.go), for the status's Files:
	// the journal keeps only the method and digest (under mu).
	early map[int]prefetch.FileVerification
}

type chunkTask struct {
	file, chunk int
	off, n      int64
}

func (f *fetch) setState(s prefetch.State) {
	f.mu.Lock()
	f.status.State = s
	f.mu.Unlock()
	f.report(0)
}

func (f *fetch) report(rate float64) {
	f.mu.Lock()
	st := f.status
	f.mu.Unlock()
	st.BytesDone = f.done.Load()
	if ms, ok := f.src.(prefetch.MultiSource); ok {
		bs := ms.ByteSources()
		st.From = &bs
	}
	if st.State == prefetch.StateDownloading && rate > 0 {
		st.BytesPerSecond = rate
		st.ETASeconds = float64(st.BytesTotal-st.BytesDone) / rate
	}
	f.progress(st)
}

// reporter reports progress every interval with the rate over the last few seconds.
func (f *fetch) reporter(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		type sample struct {
			t time.Time
			b int64
		}
		var win []sample
		t := time.NewTicker(f.e.opts.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				win = append(win, sample{now, f.done.Load()})
				for len(win) > 2 && now.Sub(win[0].t) > 5*time.Second {
					win = win[1:]
				}
				var rate float64
				if len(win) >= 2 {
					if dt := win[len(win)-1].t.Sub(win[0].t).Seconds(); dt > 0 {
						rate = float64(win[len(win)-1].b-win[0].b) / dt
					}
				}
				f.report(rate)
			}
		}
	}()
	return func() { cancel(); <-stopped }
}

func (f *fetch) run(ctx context.Context) (prefetch.ModelStatus, error) {
	e := f.e
	h := journalHeader{Source: f.src.String(), Revision: f.m.Revision, ChunkSize: e.opts.ChunkSize}
	for _, sf := range f.files {
		h.Files = append(h.Files, journalFile{Name: sf.obj.Key, Size: sf.obj.Size, ETag: sf.obj.ETag})
	}
	j, fresh, err := openJournal(e.cache, f.mp.staging, h)
	if err != nil {
		return f.status, fmt.Errorf("model %s: staging: %w", f.m.Name, err)
	}
	f.j = j
	defer func() {
		j.close()
		for _, sf := range f.files {
			if sf.fh != nil {
				sf.fh.Close()
			}
			if sf.direct != nil {
				sf.direct.Close()
			}
		}
	}()
	e.opts.Log.Info("fetching model", "model", f.m.Name, "revision", f.m.Revision, "source", f.src.String(),
		"files", len(f.files), "bytes", f.status.BytesTotal, "resume", !fresh)
	err = f.stageAndPublish(ctx)
	if err != nil {
		if errors.Is(err, ErrDiskFull) || errors.Is(err, ErrVerify) || errors.Is(err, ErrLayout) || errors.Is(err, ErrBudget) {
			// Nothing here is worth resuming (and a full disk needs the room back).
			j.close()
			if rmErr := e.cache.RemoveAll(f.mp.staging); rmErr != nil {
				err = errors.Join(err, fmt.Errorf("clean staging: %w", rmErr))
			}
		}
		return f.status, fmt.Errorf("model %s: %w", f.m.Name, err)
	}
	return f.status, nil
}

func (f *fetch) stageAndPublish(ctx context.Context) error {
	if err := f.preallocate(); err != nil {
		return err
	}
	if err := f.headAll(ctx); err != nil {
		return err
	}
	f.stageVerified()
	f.setState(prefetch.StateDownloading)
	stop := f.reporter(ctx)
	t0 := time.Now()
	err := f.download(ctx, nil)
	stop()
	if err != nil {
		return err
	}
	t1 := time.Now()
	defer func() {
		f.e.opts.Log.Info("model fetch phases", "model", f.m.Name, "download", t1.Sub(t0).String(),
			"verify_validate_publish", time.Since(t1).String())
	}()
	for attempt := 0; ; attempt++ {
		f.setState(prefetch.StateVerifying)
		bad, err := f.verifyAll(ctx)
		if err != nil {
			return err
		}
		if len(bad) == 0 {
			break
		}
		if attempt >= f.e.opts.VerifyAttempts {
			return fmt.Errorf("%w: %s still mismatched after %d refetches; the source object is corrupt or changing — re-upload it", ErrVerify, f.files[firstKey(bad)].obj.Key, attempt)
		}
		for i := range bad {
			f.e.opts.Log.Warn("file failed verification; refetching", "model", f.m.Name, "file", f.files[i].obj.Key, "err", bad[i])
			if err := f.j.reset(i); err != nil {
				return err
			}
			f.resetPieces(i)
			f.done.Add(-f.files[i].obj.Size)
		}
		f.setState(prefetch.StateDownloading)
		stop := f.reporter(ctx)
		err = f.download(ctx, bad)
		stop()
		if err != nil {
			return err
		}
	}
	if err := f.validateLayout(); err != nil {
		return err
	}
	return f.publish()
}

func firstKey(m map[int]error) int {
	k := -1
	for i := range m {
		if k < 0 || i < k {
			k = i
		}
	}
	return k
}

// preallocate creates every staging file at its full size (fallocate, so a disk that cannot hold the
// model fails now, not at 90%) and counts the bytes already journaled.
func (f *fetch) preallocate() error {
	root := f.e.cache
	data := f.mp.staging.Join(fsroot.MustPath("data"))
	if err := root.MkdirAll(data, 0o755); err != nil {
		return diskErr(err)
	}
	cs := f.e.opts.ChunkSize
	for i := range f.files {
		sf := &f.files[i]
		var err error
		if sf.data, err = data.Child(strconv.Itoa(i)); err != nil {
			return err
		}
		fh, err := root.OpenFile(sf.data, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return diskErr(fmt.Errorf("create staging file for %s: %w", sf.obj.Key, err))
		}
		sf.fh = fh
		if fi, err := fh.Stat(); err == nil && fi.Size() != sf.obj.Size {
			if err := fallocate(fh, sf.obj.Size); err != nil {
				return diskErr(fmt.Errorf("preallocate %s (%d bytes) for %s: %w", fh.Name(), sf.obj.Size, sf.obj.Key, err))
			}
		}
		if !f.e.opts.BufferedIO && sf.obj.Size >= dioAlign {
			// EINVAL here means the filesystem has no O_DIRECT (tmpfs): buffered writes then.
			if d, err := root.OpenFile(sf.data, os.O_WRONLY|unix.O_DIRECT, 0); err == nil {
				sf.direct = d
			}
		}
		for c := int64(0); c*cs < sf.obj.Size; c++ {
			if f.j.isDone(i, int(c)) {
				f.done.Add(min(cs, sf.obj.Size-c*cs))
			}
		}
	}
	return nil
}

// startWriteback asks the kernel to start writing a finished chunk's dirty pages now
// (sync_file_range SYNC_FILE_RANGE_WRITE, which does not wait for them), so buffered writes reach the
// disk while later chunks still download instead of piling up as dirty memory that throttles the
// writers and leaves the whole model for the fsync before publishing. The pages stay cached: this
// is what makes weights.pageCache=keep as durable as O_DIRECT and leaves the model in memory. A
// filesystem without it (EINVAL, ENOSYS) loses only the head start.
func startWriteback(fh *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(fh.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

func fallocate(fh *os.File, size int64) error {
	if size == 0 {
		return fh.Truncate(0)
	}
	err := unix.Fallocate(int(fh.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return fh.Truncate(size)
	}
	if err != nil {
		return err
	}
	return fh.Truncate(size) // fallocate never shrinks a longer leftover
}

// diskErr marks out-of-space errors with ErrDiskFull, naming the fix.
func diskErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w (free space on the data dir's disk or lower weights.budget)", ErrDiskFull, err)
	}
	return err
}

// download fetches every unfinished chunk of the given files (nil: all files).
func (f *fetch) download(ctx context.Context, only map[int]error) error {
	cs := f.e.opts.ChunkSize
	// Each file is verified as its last chunk lands (early.go), on a context the download's own
	// ending does not cancel: the pass returns once those verifications end too.
	ectx, cancel := context.WithCancel(ctx)
	v := newEarly(f)
	defer v.wait()
	defer cancel()
	var tasks []chunkTask
	for i, sf := range f.files {
		if only != nil {
			if _, ok := only[i]; !ok {
				continue
			}
		}
		n := 0
		for c := int64(0); c*cs < sf.obj.Size; c++ {
			if !f.j.isDone(i, int(c)) {
				tasks = append(tasks, chunkTask{file: i, chunk: int(c), off: c * cs, n: min(cs, sf.obj.Size-c*cs)})
				n++
			}
		}
		v.expect(ectx, i, n)
	}
	if len(tasks) == 0 {
		v.wait()
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	var holders func(t chunkTask) int
	if h, ok := f.src.(prefetch.Holders); ok {
		holders = func(t chunkTask) int { return h.Holders(f.files[t.file].name.String(), t.off, t.n) }
	}
	next := newPicker(tasks, holders)
	g.Go(func() error { f.checkLandedParts(gctx, only); return nil })
	wctx := prefetch.Deferrable(gctx) // a chunk no node can send now goes back to the picker
	for range min(f.e.opts.Concurrency, len(tasks)) {
		g.Go(func() error {
			for t, ok := next.take(); ok && gctx.Err() == nil; t, ok = next.take() {
				if err := f.fetchChunk(wctx, t); errors.Is(err, prefetch.ErrDeferred) {
					next.putBack(t) // take a chunk another node can send now
					continue
				} else if err != nil {
					return err
				}
				if err := f.checkParts(gctx, t); err != nil {
					return err
				}
				v.chunkDone(ectx, t.file)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err // the deferred cancel stops the verifications of this pass
	}
	v.wait()
	return ctx.Err()
}

// fetchChunk downloads one chunk, retrying it whole (after the source's own retries) a few times.
func (f *fetch) fetchChunk(ctx context.Context, t chunkTask) error {
	sf := f.files[t.file]
	var err error
	for attempt := 1; attempt <= f.e.opts.ChunkAttempts; attempt++ {
		cw := &chunkWriter{ctx: ctx, f: sf.fh, direct: sf.direct, off: t.off, pool: f.e.pool, bw: f.e.bw, want: t.n,
			onBytes: func(n int64) { f.done.Add(n); f.e.opts.OnBytes(n) }}
		if alg := sf.chunkAlg(); alg != "" {
			cw.crc, _ = objstore.NewHash(alg)
		}
		var n int64
		n, err = f.src.GetRange(ctx, sf.name, t.off, t.n, cw)
		if errors.Is(err, prefetch.ErrDeferred) && n == 0 {
			return err
		}
		if err == nil && n != t.n {
			err = fmt.Errorf("got %d of %d bytes", n, t.n)
		}
		if err == nil {
			var crc string
			if cw.crc != nil {
				crc = hex.EncodeToString(cw.crc.Sum(nil))
			}
			if sf.direct == nil {
				startWriteback(sf.fh, t.off, t.n)
			}
			return f.j.chunkDone(t.file, t.chunk, crc)
		}
		f.done.Add(-cw.written)
		if err := diskErr(err); errors.Is(err, ErrDiskFull) {
			return err
		}
		if ctx.Err() != nil || errors.Is(err, objstore.ErrNotFound) {
			break
		}
		f.e.opts.Log.Debug("chunk failed; retrying", "file", sf.obj.Key, "chunk", t.chunk, "attempt", attempt, "err", err)
		if sleepCtx(ctx, objstore.DefaultBackoff.Delay(attempt)) != nil {
			break
		}
	}
	return fmt.Errorf("fetch %s bytes %d-%d from %s: %w", sf.obj.Key, t.off, t.off+t.n-1, f.src, err)
}

// headAll asks the store for each file's checksum before the download, so full-object CRCs can be
// computed while the bytes stream (verification then needs no read-back).
func (f *fetch) headAll(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range f.files {
		sf := &f.files[i]
		if sf.obj.Size == 0 {
			continue
		}
		g.Go(func() error {
			h, err := f.src.Head(gctx, sf.name)
			if err != nil {
				return fmt.Errorf("head %s: %w", sf.obj.Key, err)
			}
			if cs := h.Checksum; cs.Value != "" && !cs.Composite && objstore.Combinable(cs.Algorithm) {
				sf.streamAlg = cs.Algorithm
			}
			f.loadPieces(gctx, i, h)
			return nil
		})
	}
	return g.Wait()
}

// streamedSum combines the journaled chunk CRCs of file i; ok is false when any chunk lacks one
// (fetched by an older warmd, or before the store reported the checksum).
func (f *fetch) streamedSum(i int) (sum []byte, ok bool) {
	return f.combinedSum(i, 0, f.files[i].obj.Size, f.files[i].streamAlg)
}

// combinedSum combines the journaled alg CRCs of the chunks of file i from byte a (a chunk boundary)
// to b (one, or the file's end); ok is false when any chunk lacks one.
func (f *fetch) combinedSum(i int, a, b int64, alg string) (sum []byte, ok bool) {
	cs := f.e.opts.ChunkSize
	for c := a / cs; c*cs < b; c++ {
		v, ok := f.j.chunkSum(i, int(c))
		if !ok {
			return nil, false
		}
		part, err := hex.DecodeString(v)
		if err != nil {
			return nil, false
		}
		if sum == nil {
			sum = part
			continue
		}
		if sum, err = objstore.CombineCRC(alg, sum, part, min(cs, b-c*cs)); err != nil {
			return nil, false
		}
	}
	return sum, sum != nil
}
