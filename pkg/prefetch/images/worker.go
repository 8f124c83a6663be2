package images

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/state"
)

// resolveTimeout bounds one registry resolution (a HEAD and a few small manifest GETs).
const resolveTimeout = time.Minute

// worker keeps one image warm until ctx ends.
func (m *Manager) worker(ctx context.Context, b prefetch.Images, e *entry) {
	m.mu.Lock()
	name := e.st.Name
	m.mu.Unlock()
	// What is already here counts: a restart of warmd loses no finished work.
	if l, err := b.Lookup(ctx, name); err == nil && l.Managed && l.Pinned && l.Unpacked {
		m.update(e, func(s *prefetch.ImageStatus) {
			s.State, s.Digest, s.Pinned = prefetch.StateReady, l.Digest.String(), true
		})
	}
	for {
		err := m.sync(ctx, b, e)
		if ctx.Err() != nil {
			return
		}
		if !m.watch(ctx, b, e, err != nil && !warm(m, e)) {
			return
		}
	}
}

// watch waits for the next sync round (imagePull.resolveInterval after this one; at most
// FailedRetry after a failed round of an image that is not warm), checking every VerifyInterval
// (without the registry) that the warm image is still present, unpacked and pinned: if someone
// removed or unpinned it, the status stops claiming it at once and the next round starts now. The
// interval is read from the config in force at every check, so a reload that shortens it applies
// to the wait already under way within one VerifyInterval. It returns false when ctx ends.
func (m *Manager) watch(ctx context.Context, b prefetch.Images, e *entry, failed bool) bool {
	began := time.Now()
	for {
		wait := m.config().ImagePull.ResolveInterval.Duration
		if failed {
			wait = min(wait, m.opts.FailedRetry)
		}
		step := min(time.Until(began.Add(wait)), m.opts.VerifyInterval)
		if step <= 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-e.wake:
			return true
		case <-time.After(step):
		}
		m.mu.Lock()
		st := e.st
		m.mu.Unlock()
		if !st.Warm() {
			continue
		}
		l, err := b.Lookup(ctx, st.Name)
		if err == nil && l.Digest.String() == st.Digest && l.Pinned && l.Unpacked {
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		reason := "the warm image disappeared from the backend"
		if err == nil {
			reason = fmt.Sprintf("the backend now holds %s (pinned %v, unpacked %v)", l.Digest, l.Pinned, l.Unpacked)
		} else if !errors.Is(err, prefetch.ErrNotFound) {
			reason = "checking the warm image failed: " + err.Error()
		}
		m.log.Warn("warm image changed under warmd; pulling again", "image", st.Name, "why", reason)
		m.update(e, func(s *prefetch.ImageStatus) {
			s.Digest, s.Pinned, s.State, s.Reason = "", false, prefetch.StateQueued, reason
		})
		return true
	}
}

func warm(m *Manager, e *entry) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.st.Warm()
}

// sync makes the image warm at the digest its reference names now: one round of up to Attempts
// tries of resolve + pull. An image given by digest is resolved once; later rounds only check it
// is still present.
func (m *Manager) sync(ctx context.Context, b prefetch.Images, e *entry) error {
	var last error
	delay := m.opts.Backoff
	for attempt := 1; ; attempt++ {
		err := m.try(ctx, b, e, attempt)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		last = err
		if errdefs.IsNotFound(err) {
			// The registry says the reference does not exist: retrying now will not change that; the
			// next round (FailedRetry or a config fix) will look again.
			last = fmt.Errorf("%w (check the image reference and that it was pushed)", err)
			break
		}
		if attempt >= m.opts.Attempts {
			break
		}
		m.update(e, func(s *prefetch.ImageStatus) {
			s.Reason = state.CleanText(fmt.Sprintf("attempt %d/%d failed, retrying in %s: %v", attempt, m.opts.Attempts, delay, err))
		})
		m.log.Warn("image pull attempt failed", "image", e.st.Name, "attempt", attempt, "of", m.opts.Attempts, "retry_in", delay, "err", err)
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
		delay = min(2*delay, m.opts.MaxBackoff)
	}
	m.update(e, func(s *prefetch.ImageStatus) {
		s.Reason = state.CleanText(fmt.Sprintf("failed after %d attempt(s): %v", s.Attempt, last))
		s.Pending, s.Layer, s.Layers, s.Bytes, s.TotalBytes = "", 0, 0, 0, 0
		if s.Warm() {
			s.State = prefetch.StateReady // the warm digest is still here; only the refresh failed
		} else {
			s.State = prefetch.StateFailed
		}
	})
	m.log.Error("image pull failed", "image", e.st.Name, "err", last)
	return last
}

// try is one attempt: resolve (unless the digest is fixed and known), then pull if the digest is not
// warm here.
func (m *Manager) try(ctx context.Context, b prefetch.Images, e *entry, attempt int) error {
	m.mu.Lock()
	st := e.st
	m.mu.Unlock()
	m.update(e, func(s *prefetch.ImageStatus) {
		s.Attempt = attempt
		if !s.Warm() {
			s.State = prefetch.StateResolving
		}
	})
	if st.Warm() && st.Name != "" && isDigestRef(st.Name) {
		if l, err := b.Lookup(ctx, st.Name); err == nil && l.Pinned && l.Unpacked && l.Digest.String() == st.Digest {
			m.update(e, func(s *prefetch.ImageStatus) { s.State, s.Reason, s.Attempt = prefetch.StateReady, "", 0 })
			return nil
		}
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	r, err := b.Resolve(rctx, st.Ref)
	cancel()
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	if l, err := b.Lookup(ctx, r.Name); err == nil && l.Digest == r.Target.Digest && l.Pinned && l.Managed && l.Unpacked {
		m.update(e, func(s *prefetch.ImageStatus) {
			s.State, s.Digest, s.Pinned, s.Pending, s.Reason, s.Attempt, s.Resolved = prefetch.StateReady, l.Digest.String(), true, "", "", 0, now
		})
		return nil
	}
	if st.Digest != "" && st.Digest != r.Target.Digest.String() {
		m.log.Info("tag moved; pulling the new digest", "image", r.Name, "from", st.Digest, "to", r.Target.Digest)
	}
	m.update(e, func(s *prefetch.ImageStatus) {
		s.State, s.Pending, s.Resolved = prefetch.StateQueued, r.Target.Digest.String(), now
		s.Layers, s.TotalBytes, s.Layer, s.Bytes = len(r.Layers), layerBytes(r), 0, 0
	})
	sem, ok := m.acquire(ctx)
	if !ok {
		return ctx.Err()
	}
	defer func() { <-sem }()
	m.update(e, func(s *prefetch.ImageStatus) {
		s.State, s.Layer, s.Unpacked = prefetch.StatePulling, min(1, len(r.Layers)), nil
	})

	deadline := m.opts.Deadline(r.Size())
	pctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	var fetched int64
	err = b.Pull(pctx, r, func(p prefetch.Progress) { fetched = m.progress(e, r.Name, p) })
	secs := time.Since(start).Seconds()
	if err != nil {
		if m.met != nil {
			m.met.PullSeconds.WithLabelValues("failure").Observe(secs)
		}
		if errors.Is(pctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return fmt.Errorf("pull of %d bytes did not finish within its %s deadline (%s + size at %d MiB/s): %w",
				r.Size(), deadline.Round(time.Second), m.opts.BaseDeadline, m.opts.MinThroughput>>20, err)
		}
		return err
	}
	if m.met != nil {
		m.met.PullSeconds.WithLabelValues("success").Observe(secs)
		m.met.Bytes.Add(float64(fetched))
		m.mu.Lock()
		for _, l := range e.st.Unpacked {
			dec := l.Decoder
			if dec == "" {
				dec = l.By
			}
			m.met.LayerUnpackSeconds.WithLabelValues(dec).Observe(l.Seconds)
			m.met.InflatedBytes.WithLabelValues(dec).Add(float64(l.Inflated))
		}
		m.mu.Unlock()
	}
	m.log.Info("image warm", "image", r.Name, "digest", r.Target.Digest, "bytes", r.Size(), "seconds", secs, "path", b.Backend().Path)
	m.update(e, func(s *prefetch.ImageStatus) {
		s.State, s.Digest, s.Pinned, s.Pending, s.Reason, s.Attempt = prefetch.StateReady, r.Target.Digest.String(), true, "", "", 0
		s.Layer, s.Bytes = s.Layers, s.TotalBytes
	})
	return nil
}

// progress folds a backend report into the status (publishing at most every 200 ms, and at every
// phase change) and returns the bytes fetched so far.
func (m *Manager) progress(e *entry, name string, p prefetch.Progress) int64 {
	var done, total int64
	complete := 0
	for _, l := range p.Layers {
		done += l.Done
		total += l.Size
		if l.Complete {
			complete++
		}
	}
	if m.opts.OnProgress != nil {
		m.opts.OnProgress(name, p)
	}
	m.mu.Lock()
	changed := e.st.State != p.Phase
	unpacked := layerReports(p.Layers)
	changed = changed || len(unpacked) != len(e.st.Unpacked)
	e.st.State, e.st.Unpacked = p.Phase, unpacked
	e.st.Layers, e.st.Layer = len(p.Layers), min(complete+1, len(p.Layers))
	e.st.Bytes, e.st.TotalBytes = done, total
	pub := changed || time.Since(e.last) >= 200*time.Millisecond
	if pub {
		e.last = time.Now()
		e.st.Updated = e.last.UTC()
	}
	m.mu.Unlock()
	if pub {
		m.publish()
	}
	return done
}

// layerReports lists the layers of a progress report that are unpacked, in manifest order.
func layerReports(layers []prefetch.LayerProgress) []prefetch.LayerReport {
	var out []prefetch.LayerReport
	for _, l := range layers {
		if l.Unpack == nil {
			continue
		}
		from := "registry"
		if l.FromPeers {
			from = "peers"
		}
		out = append(out, prefetch.LayerReport{Digest: l.Digest.String(), Bytes: l.Size, From: from,
			FetchSeconds: l.FetchSeconds, LayerUnpack: *l.Unpack})
	}
	return out
}

// acquire takes a pull slot from the current semaphore and returns that semaphore for the release;
// when a reload replaces the semaphore while this pull waits, it waits on the new one.
func (m *Manager) acquire(ctx context.Context) (chan struct{}, bool) {
	for {
		m.mu.Lock()
		sem, swap := m.sem, m.semSwap
		m.mu.Unlock()
		select {
		case sem <- struct{}{}:
			return sem, true
		case <-swap:
		case <-ctx.Done():
			return nil, false
		}
	}
}

func layerBytes(r prefetch.Resolved) int64 {
	var n int64
	for _, l := range r.Layers {
		n += l.Size
	}
	return n
}

func isDigestRef(name string) bool { return strings.Contains(name, "@sha256:") }
