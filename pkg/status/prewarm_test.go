package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/prewarm"
)

func TestWritePrewarm(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		s    prewarm.Status
		want []string
	}{
		{"nothing yet", prewarm.Status{MaxBytes: 64 << 30, MemAvailablePercent: 50},
			[]string{"PRE-WARM (page cache, at most 64.0 GiB or 50% of MemAvailable per start): no vLLM pod started here yet"}},
		{"running and ended", prewarm.Status{MaxBytes: 64 << 30, MemAvailablePercent: 50,
			Active: []prewarm.Run{{Model: "org/a", Pod: "ml/vllm-a", Started: now.Add(-3 * time.Second), Bytes: 2 << 30, Total: 15 << 30, Outcome: prewarm.OutcomeRunning}},
			Recent: []prewarm.Run{{Model: "org/b", Pod: "ml/vllm-b", Started: now.Add(-time.Minute), Ended: now.Add(-50 * time.Second),
				Bytes: 4 << 30, Total: 4 << 30, Outcome: prewarm.OutcomeCancelled, Reason: "the pod is gone"}}},
			[]string{"MODEL", "org/a  ml/vllm-a  running", "2.0 GiB of 15.0 GiB  started 3s ago",
				"cancelled (the pod is gone)", "took 10s, 50s ago"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WritePrewarm(&buf, tc.s, now); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(buf.String(), w) {
					t.Fatalf("output lacks %q:\n%s", w, buf.String())
				}
			}
		})
	}
}

// TestWritePrewarmDisabled: a disabled part says so, and how to turn it on, instead of "no vLLM pod
// started here yet".
func TestWritePrewarmDisabled(t *testing.T) {
	var b strings.Builder
	if err := WritePrewarm(&b, prewarm.Status{State: prewarm.StateDisabled, MaxBytes: 1 << 30, MemAvailablePercent: 50}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); !strings.Contains(got, ": disabled (prewarm.disabled is set; a reload that clears it starts pre-warming)") || strings.Contains(got, "no vLLM pod") {
		t.Errorf("disabled section:\n%s", got)
	}
}
