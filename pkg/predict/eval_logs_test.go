package predict

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/phases"
)

// realLogs are other people's vLLM logs kept by pkg/phases (its testdata/README names each source).
func realLogs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../phases/testdata/real-*.log")
	if err != nil || len(files) < 10 {
		t.Fatalf("real logs: %v %v", files, err)
	}
	return files
}

// TestLeaveOneOutRealLogs measures the predictor on the real starts pkg/phases keeps: every one that
// became ready is predicted from the others (go test -run LeaveOneOutRealLogs -v ./pkg/predict/).
// They come from different machines, models and vLLM versions, so this is the error of a node whose
// history holds nothing of its own model or GPU: the figure docs/signals.md states.
func TestLeaveOneOutRealLogs(t *testing.T) {
	ref := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	files := realLogs(t)
	h, err := StartsFromLogs(files, ref)
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := phases.Parse(fh, phases.Options{Reference: ref})
		fh.Close()
		if r.Outcome == phases.OutcomeReady && r.TotalSeconds != nil {
			ready++
		}
	}
	ev := LeaveOneOut(h)
	t.Log(ev)
	for _, st := range h {
		t.Logf("  %s: %s, cache %s, %.0f s", st.Node, st.Model, st.CompileCache, st.Total)
	}
	if ev.N != ready || ev.N < 6 {
		t.Fatalf("evaluated %d starts, want every ready real start (%d)", ev.N, ready)
	}
	if ev.MedianAbsError <= 0 || ev.P90AbsError < ev.MedianAbsError {
		t.Errorf("implausible figures: %v", ev)
	}
	docHas(t, ev.String())
}

// docHas fails unless docs/signals.md states the figure exactly: the page quotes measurements, and
// a change to the predictor, the parser or the fixtures must update it.
func docHas(t *testing.T, figure string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/signals.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), figure) {
		t.Errorf("docs/signals.md does not state the measured figure %q", figure)
	}
}

func TestStartsFromLogsErrors(t *testing.T) {
	if _, err := StartsFromLogs([]string{filepath.Join(t.TempDir(), "missing.log")}, time.Time{}); err == nil ||
		!strings.Contains(err.Error(), "missing.log") {
		t.Errorf("err = %v, want one naming the file", err)
	}
}
