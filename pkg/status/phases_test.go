package status

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/phases"
)

func TestRenderPhases(t *testing.T) {
	now := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)
	total := 196.15
	ok := phases.Record{Namespace: "default", Pod: "vllm-0", Model: "qwen2.5-7b", Recorded: now.Add(-5 * time.Minute),
		Result: phases.Result{Outcome: phases.OutcomeReady, CompileCache: phases.CacheMiss, TotalSeconds: &total,
			Phases: []phases.Phase{{Name: phases.PhaseWeightLoad, Seconds: 28.6}, {Name: phases.PhaseTorchCompile, Start: 51.9, Seconds: 61.8}}}}
	bad := phases.Record{Namespace: "ml", Pod: "llama-1", Restart: 2, Recorded: now.Add(-time.Hour),
		Result: phases.Result{Outcome: phases.OutcomeFailed, CompileCache: phases.CacheUnknown, Error: "ValueError: No available memory for the cache blocks."}}
	for _, tc := range []struct {
		name string
		in   phases.Status
		want []string
	}{
		{"starts", phases.Status{PodLogDir: "/var/log/pods", Following: 1, Records: []phases.Record{ok, bad}},
			[]string{"vLLM STARTS (2 kept, 1 starting now; pod logs /var/log/pods)", "5m0s ago", "default/vllm-0#0", "qwen2.5-7b",
				"miss", "196.2s", "torch.compile 61.8s", "ml/llama-1#2", "failed: ValueError: No available memory"}},
		{"none yet", phases.Status{PodLogDir: "/p", Problems: []string{"read pod log dir /p: no such file"}},
			[]string{"(no vLLM start seen yet)", "problem: read pod log dir /p"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			st := &api.RawStatus{Sections: map[string]json.RawMessage{phases.Section.Name(): raw}}
			var b strings.Builder
			if err := renderPhases(&b, st, now); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
}
