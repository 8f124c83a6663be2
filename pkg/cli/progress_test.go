package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The modes: plain prints the caller's lines and draws no bar; none prints nothing; bars draws the
// label and counters and ends when Finish is called, even with a bar a failure left short.
func TestProgressModes(t *testing.T) {
	t.Parallel()
	run := func(mode string) string {
		var errOut bytes.Buffer
		p := NewProgress(context.Background(), IOStreams{ErrOut: &errOut}, mode, 20)
		p.Bar("a", BarUpdate{Label: "layer-a", Done: 1 << 20, Total: 1 << 20, Final: true, Percent: true})
		p.Bar("b", BarUpdate{Label: "model-b", Done: 512, Total: 4096, Status: "pulling"})
		p.Printf("line %d\n", 1)
		p.Finish()
		return errOut.String()
	}
	if got := run(ProgressPlain); got != "line 1\n" {
		t.Errorf("plain wrote %q, want only the printed line", got)
	}
	if got := run(ProgressNone); got != "" {
		t.Errorf("none wrote %q", got)
	}
	got := run(ProgressBars)
	// mpb trims the rest to the width it assumes off a terminal.
	for _, want := range []string{"layer-a", "1.0 MiB", "model-b", "pulling"} {
		if !strings.Contains(got, want) {
			t.Errorf("bars output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "line 1") {
		t.Errorf("bars mode printed a plain line:\n%s", got)
	}
	if got := run(ProgressAuto); got != "line 1\n" {
		t.Errorf("auto on a non-terminal wrote %q, want plain", got)
	}
	if err := CheckProgress("fancy"); err == nil {
		t.Error("CheckProgress accepted fancy")
	}
}
