package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/readiness"
)

func TestWriteReadiness(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		s    readiness.Status
		want []string
	}{
		{"cold with a failure", readiness.Status{
			Node: "gpu-1", StartupTaint: true, Condition: readiness.Condition{Reason: "ModelFailed"},
			Models: map[string]readiness.ModelState{
				"Qwen/Qwen2.5-7B-Instruct": {State: readiness.StateWeights, Missing: []string{"compile cache for h100"}},
				"bad/model":                {State: readiness.StateFailed, Reason: "weights: sha256 mismatch"},
			},
			LastSync: &readiness.SyncResult{Time: now.Add(-3 * time.Second), Error: "connection refused", Blocked: []string{"warmd.io/gpu.sku"}},
		}, []string{"NOT WARM (WarmdReady: ModelFailed), startup taint warmd.io/cold:NoSchedule on", "FAILED 3s ago",
			"owned by another field manager): warmd.io/gpu.sku", "Qwen/Qwen2.5-7B-Instruct  weights  compile cache for h100",
			"bad/model                 failed   weights: sha256 mismatch"}},
		{"warm, no models", readiness.Status{Node: "cpu-1", Warm: true, Condition: readiness.Condition{Reason: "NoModelsWanted"},
			LastSync: &readiness.SyncResult{Time: now}},
			[]string{"cpu-1: warm (WarmdReady: NoModelsWanted)", "in sync as of 0s ago", "(no model selects this node)"}},
		{"node missing", readiness.Status{Node: "new-1", LastSync: &readiness.SyncResult{NodeMissing: true}},
			[]string{"waiting for the kubelet to register new-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteReadiness(&b, tc.s, now); err != nil {
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
