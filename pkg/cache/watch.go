package cache

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watcher watches a SKU tree recursively and says when it has been quiet long enough to capture.
// inotify watches one dir, not a subtree, so every dir that appears is added as it is created (and
// scanned, for files written before its watch existed). When the kernel queue overflows, events are
// lost: the watcher then re-adds every dir and reports the tree dirty, and capture's full scan finds
// whatever the lost events named.
type Watcher struct {
	root  string
	quiet time.Duration
	now   func() time.Time

	w *fsnotify.Watcher

	mu        sync.Mutex
	dirty     bool
	lastEvent time.Time
	Overflows int
}

// NewWatcher starts watching root.
func NewWatcher(root string, quiet time.Duration, now func() time.Time) (*Watcher, error) {
	if now == nil {
		now = time.Now
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &Watcher{root: root, quiet: quiet, now: now, w: fw}
	w.addTree(root)
	w.dirty, w.lastEvent = true, now() // capture what is already there once the tree is quiet
	return w, nil
}

// Close stops the watch.
func (w *Watcher) Close() error { return w.w.Close() }

func (w *Watcher) addTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if ignored(filepath.ToSlash(d.Name())) && p != dir {
				return filepath.SkipDir
			}
			_ = w.w.Add(p) // a dir that vanished meanwhile is fine
		}
		return nil
	})
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
				if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
					w.addTree(ev.Name)
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
		w.addTree(w.root)
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
