package cache

import (
	"context"

	"warmd.io/warmd/pkg/phases"
)

// followStarts reports every vLLM start recorded in the phases section to hit/miss accounting, once,
// until ctx ends. Starts already recorded when it begins were reported by the previous run and are not
// counted again.
func (p *Part) followStarts(ctx context.Context) {
	var seen map[string]bool
	for {
		ch := p.store.Changed()
		st, _ := phases.Section.Get(p.store)
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
				p.ReportStart(rep)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// inUse is the manager's InUse: the per-model vLLM trees of the models running pods serve.
func (p *Part) inUse() []string {
	if p.o.Running == nil {
		return nil
	}
	var trees []string
	for _, m := range p.o.Running() {
		if t, err := ModelTree(m); err == nil { // a name that is no model id has no tree
			trees = append(trees, t)
		}
	}
	return trees
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
