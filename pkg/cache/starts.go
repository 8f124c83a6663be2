package cache

import (
	"context"

	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/state"
)

// StartsBridge tells the cache part about every vLLM start pkg/phases records, once, so the part can
// judge hits and count a start that compiled although its SKU's cache had been restored
// (warmd_compile_cache_restored_but_missed_total). Starts already recorded when the daemon starts were
// reported by the previous run and are not counted again.
type StartsBridge struct {
	Store *state.Store
	Cache *Part
}

var _ daemon.Part = (*StartsBridge)(nil)

// Name implements daemon.Part.
func (b *StartsBridge) Name() string { return "compile-cache-starts" }

// Run follows the phases section until ctx ends.
func (b *StartsBridge) Run(ctx context.Context) error {
	var seen map[string]bool
	for {
		ch := b.Store.Changed()
		st, _ := phases.Section.Get(b.Store)
		if seen == nil {
			seen = map[string]bool{}
			for i := range st.Records {
				seen[st.Records[i].Key()] = true
			}
		}
		for i := len(st.Records) - 1; i >= 0; i-- { // records are newest first; report in order
			r := st.Records[i]
			if seen[r.Key()] {
				continue
			}
			seen[r.Key()] = true
			if rep, ok := Report(r); ok {
				b.Cache.ReportStart(rep)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		}
	}
}

// Report turns a recorded start into what the cache judges; ok is false when the log did not tell
// whether the start compiled (disabled, unknown).
func Report(r phases.Record) (StartReport, bool) {
	res := r.Result
	if res.CompileCache != phases.CacheHit && res.CompileCache != phases.CacheMiss {
		return StartReport{}, false
	}
	t := res.StartedAt
	if t.IsZero() {
		t = r.Recorded
	}
	return StartReport{Time: t, Compiled: res.CompileCache == phases.CacheMiss, CacheDir: res.CompileCacheDir,
		VLLMVersion: res.VLLMVersion}, true
}
