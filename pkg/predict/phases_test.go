package predict

import (
	"os"
	"testing"
	"time"

	"warmd.io/warmd/pkg/phases"
)

// TestFromRecordSeedLogs parses the seed-mimicking logs pkg/phases keeps and predicts from them:
// the parser's output is this package's input, end to end.
func TestFromRecordSeedLogs(t *testing.T) {
	parse := func(name string) phases.Result {
		f, err := os.Open("../phases/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		res, err := phases.Parse(f, phases.Options{Source: name})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	cold := phases.Record{Model: m7b, GPUSKU: h100, Result: parse("seed-7b-cold.log")}
	warm := phases.Record{Model: m7b, GPUSKU: h100, Result: parse("seed-7b-warm.log")}
	failed := phases.Record{Model: m7b, GPUSKU: h100, Result: phases.Result{Outcome: phases.OutcomeFailed}}
	starts := FromRecords("n1", []phases.Record{cold, warm, failed})
	if len(starts) != 2 {
		t.Fatalf("got %d starts, want the 2 ready ones", len(starts))
	}
	if starts[0].CompileCache != phases.CacheMiss || starts[1].CompileCache != phases.CacheHit || starts[0].Node != "n1" {
		t.Fatalf("starts = %+v", starts)
	}
	for _, st := range starts {
		// one start on this node: the SKU scope answers, and the prediction is that start exactly
		p := (&Predictor{History: []Start{st}}).Predict(Situation{Model: m7b, Node: "n2", SKU: h100, ImageLocal: true, WeightsLocal: true, Cache: st.CompileCache}, Throughput{})
		if d := p.Seconds - st.Total; d < -1e-6 || d > 1e-6 {
			t.Errorf("%s: predicted %.1f s from its own start of %.1f s", st.CompileCache, p.Seconds, st.Total)
		}
		t.Logf("%s start: %.1f s", st.CompileCache, st.Total)
	}
}

func TestFromRecordTakesThePullOutOfTotal(t *testing.T) {
	total := 100.0
	r := phases.Record{Model: m7b, GPUSKU: h100, Recorded: t0Predict, Result: phases.Result{
		Outcome: phases.OutcomeReady, CompileCache: phases.CacheHit, TotalSeconds: &total,
		Phases: []phases.Phase{{Name: phases.PhaseImagePull, Seconds: 30}, {Name: phases.PhaseImports, Seconds: 10}},
	}}
	st, ok := FromRecord("n1", r)
	if !ok || st.Total != 70 || st.Phases[phases.PhaseImagePull] != 30 || !st.At.Equal(t0Predict) {
		t.Errorf("FromRecord = %+v, %v", st, ok)
	}
}

var t0Predict = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
