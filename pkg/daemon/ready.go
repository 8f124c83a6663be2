package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// readiness answers /readyz: ready once every part has finished its first pass, not ready again when
// a part stops on its own or the daemon shuts down. The config was loaded before Run was called, so it
// needs no check of its own.
type readiness struct {
	parts []Part

	mu       sync.Mutex
	down     map[string]bool // parts whose Run returned
	stopping bool
}

func newReadiness(parts []Part) *readiness {
	return &readiness{parts: parts, down: map[string]bool{}}
}

// stopped records that p's Run returned.
func (r *readiness) stopped(p Part) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down[p.Name()] = true
}

// stop records the start of shutdown: the pod is leaving and should get no new traffic.
func (r *readiness) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
}

// check is nil when the daemon is ready, else an error naming every part that is not and why.
func (r *readiness) check() error {
	r.mu.Lock()
	stopping, down := r.stopping, make(map[string]bool, len(r.down))
	for k, v := range r.down {
		down[k] = v
	}
	r.mu.Unlock()
	if stopping {
		return errors.New("warmd is shutting down")
	}
	var why []string
	for _, p := range r.parts {
		switch err := p.Ready(); {
		case down[p.Name()]:
			why = append(why, p.Name()+": stopped")
		case err != nil:
			why = append(why, fmt.Sprintf("%s: %v", p.Name(), err))
		}
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New(strings.Join(why, "; "))
}

// logChanges logs each change between ready and not ready (checked every second) until ctx ends, so
// the log says when the node's first pass finished and why it is not ready.
func (r *readiness) logChanges(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := ""
	for {
		err := r.check()
		cur := "ready"
		if err != nil {
			cur = err.Error()
		}
		if cur != last {
			if err == nil {
				log.Info("ready: every part finished its first pass")
			} else {
				log.Info("not ready", "reason", cur)
			}
			last = cur
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
