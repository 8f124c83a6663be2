package cache

import (
	"testing"
	"time"

	"warmd.io/warmd/pkg/phases"
)

func TestReportFromRecordedStart(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name     string
		cache    phases.CompileCache
		ok       bool
		compiled bool
	}{
		{"hit", phases.CacheHit, true, false},
		{"miss", phases.CacheMiss, true, true},
		{"disabled says nothing", phases.CacheDisabled, false, false},
		{"unknown says nothing", phases.CompileCache("unknown"), false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := phases.Record{Recorded: at.Add(time.Minute), Result: phases.Result{CompileCache: tc.cache, StartedAt: at,
				CompileCacheDir: "/root/.cache/vllm/torch_compile_cache/3ac1b9c47e", VLLMVersion: "0.10.2"}}
			rep, ok := Report(r)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if ok && (rep.Compiled != tc.compiled || !rep.Time.Equal(at) || rep.VLLMVersion != "0.10.2" || rep.CacheDir == "") {
				t.Errorf("report = %+v", rep)
			}
		})
	}
}
