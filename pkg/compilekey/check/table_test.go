package check

import (
	"path/filepath"
	"testing"
	"time"

	"warmd.io/warmd/pkg/compilekey"
	"warmd.io/warmd/pkg/phases"
)

func TestTableKeepsNewestStartsWithGraphs(t *testing.T) {
	var tb table
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxEntries + 5 {
		in := compilekey.Inputs{Model: "m", TP: i + 1}
		tb.put(phases.StartKey("ns", "p", "uid", "vllm", i), entry{Recorded: t0.Add(time.Duration(i) * time.Second), Graphs: i%2 == 0, Inputs: &in})
	}
	tb.put("no-inputs", entry{Recorded: t0.Add(time.Hour), Graphs: true})
	cached, n := tb.cached()
	if len(tb.Starts) != maxEntries || n != len(cached) || n != 128 { // i = 6…260 kept (the 6 oldest dropped), the even ones left graphs
		t.Fatalf("%d entries, %d cached", len(tb.Starts), n)
	}
	if cached[0].TP != 7 || cached[len(cached)-1].TP != maxEntries+5 {
		t.Fatalf("oldest kept TP %d, newest %d: want the oldest dropped first, in recorded order", cached[0].TP, cached[len(cached)-1].TP)
	}
	path := filepath.Join(t.TempDir(), "state", tableFile)
	if err := saveTable(path, tb); err != nil {
		t.Fatal(err)
	}
	back, err := loadTable(path)
	if err != nil || len(back.Starts) != len(tb.Starts) {
		t.Fatalf("read back %d entries, %v", len(back.Starts), err)
	}
}

func TestAgreement(t *testing.T) {
	for _, c := range []struct {
		pred compilekey.Outcome
		obs  phases.CompileCache
		want string
	}{
		{compilekey.Hit, phases.CacheHit, Agree},
		{compilekey.Miss, phases.CacheMiss, Agree},
		{compilekey.Hit, phases.CacheMiss, Disagree},
		{compilekey.Miss, phases.CacheHit, Disagree},
		{compilekey.Unknown, phases.CacheHit, Undecided},
		{compilekey.Miss, phases.CacheDisabled, Undecided},
		{compilekey.Hit, phases.CacheUnknown, Undecided},
	} {
		if got := agreement(c.pred, c.obs); got != c.want {
			t.Errorf("agreement(%s, %s) = %s, want %s", c.pred, c.obs, got, c.want)
		}
	}
}
