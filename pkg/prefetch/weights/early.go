package weights

import (
	"context"
	"errors"
	"maps"
	"sync"

	"warmd.io/warmd/pkg/prefetch"
)

// Files are verified as they complete, not after the whole download: each file whose last chunk
// landed is verified at once (beside the chunks still downloading), so a verified file of a revision
// in flight can be served to peers (ModelStatus.Staged) while the rest of it still downloads, and the
// verify step after the download is left only the files that were not verified yet.

// earlyVerifiers bounds the files verified at once during a download: a read-back hash (an MD5 ETag,
// a sha256 manifest) reads the whole file, and the download needs the disk too.
const earlyVerifiers = 2

// early is one download's verification of files as they complete.
type early struct {
	f        *fetch
	sem      chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
	manifest map[string]manifestEntry
	mErr     error
	mu       sync.Mutex
	left     map[int]int // chunks not yet done, per file of the running download pass
}

func newEarly(f *fetch) *early {
	return &early{f: f, sem: make(chan struct{}, earlyVerifiers), left: map[int]int{}}
}

// expect records the chunks of file i this download pass fetches; a file with none left is verified now.
func (v *early) expect(ctx context.Context, i, chunks int) {
	if chunks == 0 {
		v.start(ctx, i)
		return
	}
	v.mu.Lock()
	v.left[i] = chunks
	v.mu.Unlock()
}

// chunkDone counts one finished chunk of file i and verifies the file when it was the last.
func (v *early) chunkDone(ctx context.Context, i int) {
	v.mu.Lock()
	v.left[i]--
	last := v.left[i] == 0
	if last {
		delete(v.left, i)
	}
	v.mu.Unlock()
	if last {
		v.start(ctx, i)
	}
}

// start verifies file i in the background unless the journal has it verified already. A mismatch or
// any error leaves the file unverified: the verify step after the download checks it again and
// refetches or fails it, as it does every file.
func (v *early) start(ctx context.Context, i int) {
	f := v.f
	if _, ok := f.j.verifiedAs(i); ok {
		return
	}
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		select {
		case v.sem <- struct{}{}:
			defer func() { <-v.sem }()
		case <-ctx.Done():
			return
		}
		v.once.Do(func() { v.manifest, v.mErr = f.loadManifest(ctx) })
		if v.mErr != nil {
			return
		}
		fv, err := f.verifyFile(ctx, i, v.manifest)
		if err != nil {
			if !errors.Is(err, errMismatch) && ctx.Err() == nil {
				f.e.opts.Log.Debug("file not verified yet; the verify step tries again", "model", f.m.Name, "file", f.files[i].obj.Key, "err", err)
			}
			return
		}
		if f.j.markVerified(i, fv.Method, fv.Digest) == nil {
			f.mu.Lock()
			if f.early == nil {
				f.early = map[int]prefetch.FileVerification{}
			}
			f.early[i] = fv
			f.mu.Unlock()
			f.stage(i)
		}
	}()
}

// wait returns once every verification started has ended.
func (v *early) wait() { v.wg.Wait() }

// stage records verified file i as servable from its staging file until the model is published.
// The map is replaced, never changed, so a status handed out earlier stays as it was.
func (f *fetch) stage(i int) {
	sf := f.files[i]
	f.mu.Lock()
	staged := maps.Clone(f.status.Staged)
	if staged == nil {
		staged = map[string]string{}
	}
	staged[sf.obj.Key] = sf.data.String()
	f.status.Staged = staged
	f.dropPiecesLocked(sf.obj.Key) // served whole now
	f.mu.Unlock()
}

// stageVerified records every file the journal has verified (a resumed download) as servable.
func (f *fetch) stageVerified() {
	for i := range f.files {
		if _, ok := f.j.verifiedAs(i); ok {
			f.stage(i)
		}
	}
}
