package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch calls onChange each time the content of the file at path changes, with the newly parsed
// config or the error that makes it unusable (the caller keeps running the old one). It watches the
// file's directory, not the file: a mounted ConfigMap swaps a `..data` symlink, which replaces the file
// without ever writing to it. A slow poll backs the watch up, since inotify can miss events on some
// volume types. Watch returns when ctx ends. initial is the content already loaded.
func Watch(ctx context.Context, path string, initial []byte, poll time.Duration, onChange func(*NodeConfig, error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	defer w.Close()
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch config dir %s: %w", dir, err)
	}
	if poll <= 0 {
		poll = 10 * time.Second
	}
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	last := initial
	// Editors and the kubelet write in several steps; wait for a short quiet spell before reading.
	var debounce <-chan time.Time
	check := func() {
		data, err := Read(path) // capped like the first read: a reload must not cost more than a start
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) { // mid-swap the file may be briefly absent; the next event retries
				onChange(nil, err)
			}
			return
		}
		if bytes.Equal(data, last) {
			return
		}
		last = data
		onChange(Parse(data))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			debounce = time.After(100 * time.Millisecond)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			onChange(nil, fmt.Errorf("watch config: %w", err))
		case <-debounce:
			debounce = nil
			check()
		case <-ticker.C:
			check()
		}
	}
}
