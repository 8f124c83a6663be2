package readiness_test

import (
	"context"
	"testing"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/readiness"
	"warmd.io/warmd/pkg/state"
)

// TestLocalPartReportsWarmthWithoutAPIServer: with readiness disabled the node still knows and reports
// whether it is warm (for `warmd status --check` and the demo), re-evaluating as parts publish.
func TestLocalPartReportsWarmthWithoutAPIServer(t *testing.T) {
	cfg := &config.NodeConfig{NodeName: "n1", Readiness: config.Readiness{Disabled: true},
		Models: []config.Model{{Name: "org/m", Revision: "main"}, {Name: "org/other", Revision: "main",
			NodeSelector: nil}}}
	store := state.New(nil)
	input := func(snap state.Snapshot, c *config.NodeConfig, wants func(config.Model) bool) readiness.Input {
		verified, _ := snap.Sections["test-weights"].(string)
		in := readiness.Input{}
		for _, m := range c.Models {
			in.Models = append(in.Models, readiness.ModelInput{Name: m.Name, Wants: wants(m),
				Weights: readiness.WeightsFacts{Revision: "main", VerifiedRevision: verified}})
		}
		return in
	}
	part, err := readiness.New(daemon.Deps{Config: cfg, Store: store}, readiness.Options{Input: input})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- part.Run(ctx) }()
	wait := func(warm bool) readiness.Status {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if st, ok := store.Get(state.SectionReadiness).(readiness.Status); ok && st.Warm == warm {
				return st
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("readiness never reported warm=%v: %+v", warm, store.Get(state.SectionReadiness))
		return readiness.Status{}
	}
	st := wait(false)
	if st.Models["org/m"].State != readiness.StateCold || st.NodeKnown {
		t.Errorf("cold status = %+v", st)
	}
	store.Publish("test-weights", "main")
	st = wait(true)
	if st.Models["org/m"].State != readiness.StateWarm || st.Labels["warmd.io/warm"] != "true" {
		t.Errorf("warm status = %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
