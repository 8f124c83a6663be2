package oci

import (
	"context"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	digest "github.com/opencontainers/go-digest"

	"warmd.io/warmd/pkg/prefetch"
)

// PollContent reads the content store's in-flight writes (ListStatuses) and committed blobs (Info) until
// ctx ends, feeding the tracker.
func PollContent(ctx context.Context, cs content.Store, tr *Tracker, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		statuses, err := cs.ListStatuses(ctx)
		if err == nil {
			for _, st := range statuses {
				if st.Expected != "" {
					tr.Set(st.Expected, st.Offset, false)
				}
			}
		}
		for _, d := range tr.pending() {
			if _, err := cs.Info(ctx, d); err == nil {
				tr.Set(d, -1, true)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tracker folds backend events into prefetch.Progress snapshots. Events come from concurrent fetch and
// apply goroutines; fn is called from one at a time, in the order the snapshots were taken.
type Tracker struct {
	mu     sync.Mutex
	emitMu sync.Mutex // held from snapshot to the end of fn, so fn is never called concurrently
	index  map[digest.Digest]int
	layers []prefetch.LayerProgress
	fn     func(prefetch.Progress)
	start  time.Time
}

// NewTracker tracks r's layers and reports to fn.
func NewTracker(r prefetch.Resolved, fn func(prefetch.Progress)) *Tracker {
	t := &Tracker{index: map[digest.Digest]int{}, fn: fn, start: time.Now()}
	for i, l := range r.Layers {
		t.index[l.Digest] = i
		t.layers = append(t.layers, prefetch.LayerProgress{Digest: l.Digest, Size: l.Size})
	}
	return t
}

// Set records done bytes (-1: unchanged) for a layer; non-layer descriptors are ignored.
func (t *Tracker) Set(d digest.Digest, done int64, complete bool) {
	t.update(d, func(l *prefetch.LayerProgress) bool {
		if l.Complete || (!complete && done <= l.Done) {
			return false
		}
		if complete {
			t.complete(l)
		} else if done >= 0 {
			l.Done = min(done, l.Size)
		}
		return true
	})
}

// FromPeers records that warm peers delivered layer d, verified and in the content store.
func (t *Tracker) FromPeers(d digest.Digest) {
	t.update(d, func(l *prefetch.LayerProgress) bool {
		l.FromPeers = true
		if !l.Complete {
			t.complete(l)
		}
		return true
	})
}

// Unpacked records how layer d was unpacked and reports it.
func (t *Tracker) Unpacked(d digest.Digest, u prefetch.LayerUnpack) {
	t.update(d, func(l *prefetch.LayerProgress) bool {
		l.Unpack = &u
		return true
	})
}

// update applies change to layer d under t.mu and reports a snapshot when change says it changed
// something; descriptors that are not layers of the image are ignored.
func (t *Tracker) update(d digest.Digest, change func(*prefetch.LayerProgress) bool) {
	t.mu.Lock()
	i, ok := t.index[d]
	if !ok || !change(&t.layers[i]) {
		t.mu.Unlock()
		return
	}
	t.emit(t.snapshot())
}

// complete marks l fetched whole now; t.mu is held.
func (t *Tracker) complete(l *prefetch.LayerProgress) {
	l.Complete, l.Done = true, l.Size
	l.FetchSeconds = time.Since(t.start).Seconds()
}

// emit hands p to fn; t.mu is held on entry and released here, after emitMu is taken, so snapshots
// reach fn in the order they were taken and never two at once.
func (t *Tracker) emit(p prefetch.Progress) {
	t.emitMu.Lock()
	t.mu.Unlock()
	defer t.emitMu.Unlock()
	t.fn(p)
}

// snapshot copies the layers (each Unpack too, so the receiver owns what it gets); t.mu is held.
func (t *Tracker) snapshot() prefetch.Progress {
	p := prefetch.Progress{Phase: prefetch.StatePulling, Layers: append([]prefetch.LayerProgress(nil), t.layers...)}
	all := true
	for i, l := range t.layers {
		all = all && l.Complete
		if l.Unpack != nil {
			u := *l.Unpack
			p.Layers[i].Unpack = &u
		}
	}
	if all {
		p.Phase = prefetch.StateUnpacking
	}
	return p
}

func (t *Tracker) pending() []digest.Digest {
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
