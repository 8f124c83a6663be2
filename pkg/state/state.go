// Package state owns the node-state snapshot: one in-memory, versioned view that every part of warmd
// publishes its own section to (images, weights, GPU, caches, phases) and that readers (the local API,
// readiness) subscribe to. It does no I/O.
//
// Each part owns one section, keyed by a stable name, and replaces it whole; a section's value is the
// part's own status type, so readers that know the part can type-assert, and everything else sees JSON.
package state

import (
	"context"
	"maps"
	"sync"
	"time"
)

// Section names of the parts, so publishers and readers agree on spelling.
const (
	SectionDaemon    = "daemon"
	SectionConfig    = "config"
	SectionGPU       = "gpu"
	SectionImages    = "images"
	SectionWeights   = "weights"
	SectionCache     = "compileCache"
	SectionPhases    = "phases"
	SectionPrewarm   = "prewarm"
	SectionReadiness = "readiness"
)

// Snapshot is an immutable view of the node state at one version.
type Snapshot struct {
	// Version increases by one with every Publish; readers use it to skip work when nothing changed.
	Version  uint64         `json:"version"`
	Updated  time.Time      `json:"updated"`
	Sections map[string]any `json:"sections"`
}

// Store holds the current snapshot. The zero value is not usable; use New.
type Store struct {
	mu      sync.Mutex
	snap    Snapshot
	changed chan struct{} // closed and replaced on every Publish
	now     func() time.Time
}

// New returns an empty store. now is the clock (time.Now in production, a fake in tests).
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{snap: Snapshot{Sections: map[string]any{}}, changed: make(chan struct{}), now: now}
}

// Publish replaces one section. v must not be mutated afterwards: readers share it.
func (s *Store) Publish(section string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := maps.Clone(s.snap.Sections)
	next[section] = v
	s.snap = Snapshot{Version: s.snap.Version + 1, Updated: s.now(), Sections: next}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Snapshot returns the current snapshot.
func (s *Store) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

// Get returns one section's value, or nil.
func (s *Store) Get(section string) any {
	return s.Snapshot().Sections[section]
}

// Changed returns a channel closed at the next Publish. Readers loop: snapshot, work, wait on Changed.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// WaitNewer blocks until the store's version exceeds v or ctx ends, and returns the newest snapshot.
func (s *Store) WaitNewer(ctx context.Context, v uint64) (Snapshot, error) {
	for {
		ch := s.Changed()
		if snap := s.Snapshot(); snap.Version > v {
			return snap, nil
		}
		select {
		case <-ctx.Done():
			return s.Snapshot(), ctx.Err()
		case <-ch:
		}
	}
}
