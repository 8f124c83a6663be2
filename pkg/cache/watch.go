package cache

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"warmd.io/warmd/pkg/fsroot"
)

// Watcher watches a SKU tree recursively and says when it has been quiet long enough to capture.
// inotify watches one dir, not a subtree, so every dir that appears is added as it is created (and
// scanned, for files written before its watch existed). When the kernel queue overflows, events are
// lost: the watcher then re-adds every dir and reports the tree dirty, and capture's full scan finds
// whatever the lost events named.
//
// The tree is pod-written. Dirs to watch are found by walking it by handle (fsroot), never through a
// link, so a pod that swaps a dir for a link to / cannot make warmd walk the host and spend the node's
// inotify watches (which the kubelet and containerd need too). inotify itself takes a path: in the
// instant between the walk and the add, a swap can still put one watch on the link's target; that
// only ever costs a spurious "dirty", and the scan it triggers goes by handle too.
type Watcher struct {
	tree  *fsroot.Root
	quiet time.Duration
	now   func() time.Time

	w *fsnotify.Watcher

	mu        sync.Mutex
	dirty     bool
	lastEvent time.Time
	Overflows int
}

// NewWatcher starts watching tree.
func NewWatcher(tree *fsroot.Root, quiet time.Duration, now func() time.Time) (*Watcher, error) {
	if now == nil {
		now = time.Now
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &Watcher{tree: tree, quiet: quiet, now: now, w: fw}
	w.addTree(fsroot.Path{})
	w.dirty, w.lastEvent = true, now() // capture what is already there once the tree is quiet
	return w, nil
}

// Close stops the watch.
func (w *Watcher) Close() error { return w.w.Close() }

// addTree watches dir (a path of the tree) and every dir below it, walked by handle.
func (w *Watcher) addTree(dir fsroot.Path) {
	if fi, err := w.tree.Lstat(dir); err != nil || !fi.IsDir() {
		return // gone, or a link: never watched, never walked
	}
	_ = w.w.Add(w.tree.Name(dir))
	_ = w.tree.WalkDir(dir, func(p fsroot.Path, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if ignored(d.Name()) {
			return fs.SkipDir
		}
		_ = w.w.Add(w.tree.Name(p)) // a dir that vanished meanwhile is fine
		return nil
	})
}

// rel turns an event's name back into a path of the tree; ok is false for anything else.
func (w *Watcher) rel(name string) (fsroot.Path, bool) {
	rest, ok := strings.CutPrefix(name, w.tree.Dir()+"/")
	if !ok {
		return fsroot.Path{}, false
	}
	p, err := fsroot.ParsePath(rest)
	return p, err == nil
}

// Run consumes events until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.w.Events:
			if !ok {
				return
			}
			if ev.Has(fsnotify.Create) {
				if p, ok := w.rel(ev.Name); ok {
					w.addTree(p)
				}
			}
			w.touch()
		case err, ok := <-w.w.Errors:
			if !ok {
				return
			}
			w.handleError(err)
		}
	}
}

// handleError treats every watch error as "events may be lost": on overflow it re-adds the watches
// of the whole tree; either way the tree is due for a full scan after the quiet period.
func (w *Watcher) handleError(err error) {
	if errors.Is(err, fsnotify.ErrEventOverflow) {
		w.mu.Lock()
		w.Overflows++
		w.mu.Unlock()
		w.addTree(fsroot.Path{})
	}
	w.touch()
}

func (w *Watcher) touch() {
	w.mu.Lock()
	w.dirty, w.lastEvent = true, w.now()
	w.mu.Unlock()
}

// Due reports whether the tree changed and has been quiet for the quiet period; it clears the dirty
// flag when it says yes.
func (w *Watcher) Due() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.dirty || w.now().Sub(w.lastEvent) < w.quiet {
		return false
	}
	w.dirty = false
	return true
}

// Again marks the tree dirty from now: files were still incomplete, look again after a quiet period.
func (w *Watcher) Again() { w.touch() }
