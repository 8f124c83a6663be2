package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/compilekey"
	"warmd.io/warmd/pkg/compilekey/check"
	"warmd.io/warmd/pkg/phases"
)

func TestWriteCompileKey(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	s := check.Status{Cached: 2, Agree: 3, Disagree: 1,
		Pending: []check.Check{{Pod: "ml/vllm-a", Model: "org/a", Predicted: compilekey.Miss,
			Differs: []string{compilekey.InTP, "env:VLLM_ATTENTION_BACKEND"}, Checked: now.Add(-4 * time.Second)}},
		Recent: []check.Check{{Pod: "ml/vllm-b", Model: "org/b", Predicted: compilekey.Hit, Observed: phases.CacheHit,
			Agreement: check.Agree, Checked: now.Add(-time.Minute)}}}
	var buf bytes.Buffer
	if err := WriteCompileKey(&buf, s, now); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"2 cached start(s) compared; predictions checked: 3 agree, 1 disagree, 0 undecided",
		"ml/vllm-a  org/a  miss       pending", "differs: tensorParallelSize, env:VLLM_ATTENTION_BACKEND (4s ago)",
		"ml/vllm-b  org/b  hit        hit (agree)"} {
		if !strings.Contains(buf.String(), w) {
			t.Fatalf("output lacks %q:\n%s", w, buf.String())
		}
	}
}
