package images

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/state"
)

// Once opens the backend, makes every wanted image warm once (the same resolve, retry and deadline
// rules as the daemon, without the re-resolution loop and without releasing anything), and returns
// the final status. The error names every image that failed.
func (m *Manager) Once(ctx context.Context) (prefetch.ImagesStatus, error) {
	cfg := m.config()
	b, err := m.opts.Open(ctx, cfg, m.log)
	if err != nil {
		return prefetch.ImagesStatus{Error: err.Error()}, err
	}
	defer b.Close()
	m.mu.Lock()
	m.backend, m.info = b, b.Backend()
	m.mu.Unlock()
	want := Wanted(cfg, m.opts.Wants)
	var wg sync.WaitGroup
	for _, w := range want {
		e := &entry{st: prefetch.ImageStatus{Ref: w.Ref, Name: w.Name, Models: w.Models, State: prefetch.StateQueued}, done: make(chan struct{})}
		if w.Err != nil {
			e.st.State, e.st.Reason = prefetch.StateFailed, state.Reason(w.Err)
		}
		m.mu.Lock()
		m.entries[w.Name] = e
		m.order = append(m.order, w.Name)
		m.mu.Unlock()
		if w.Err != nil {
			continue
		}
		wg.Go(func() {
			if l, err := b.Lookup(ctx, w.Name); err == nil && l.Managed && l.Pinned && l.Unpacked {
				m.update(e, func(s *prefetch.ImageStatus) { s.Digest, s.Pinned = l.Digest.String(), true })
			}
			_ = m.sync(ctx, b, e)
		})
	}
	m.publish()
	wg.Wait()
	st := m.Status()
	var errs []error
	for _, im := range st.Images {
		if im.State != prefetch.StateReady {
			errs = append(errs, fmt.Errorf("%s: %s", im.Ref, im.Reason))
		}
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return st, errors.Join(errs...)
}
