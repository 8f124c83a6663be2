package readiness_test

import (
	"context"
	"testing"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/readiness"
	"warmd.io/warmd/pkg/state"
	"warmd.io/warmd/pkg/state/statetest"
)

// TestLocalPartReportsWarmthWithoutAPIServer: with readiness disabled the node still knows and reports
// whether it is warm (for `warmd status --check` and the demo), re-evaluating as parts publish.
// testWeights stands in for the weights part's section: the local part re-evaluates on any publish.
var testWeights = state.NewKey[string]("test-weights")

func TestLocalPartReportsWarmthWithoutAPIServer(t *testing.T) {
	cfg := &config.NodeConfig{NodeName: "n1", Readiness: config.Readiness{Disabled: true},
		Models: []config.Model{{Name: "org/m", Revision: "main"}, {Name: "org/other", Revision: "main",
			NodeSelector: nil}}}
	store := state.New(nil)
	input := func(snap state.Snapshot, c *config.NodeConfig, wants func(config.Model) bool) readiness.Input {
		verified, _ := testWeights.From(snap)
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
		return statetest.Wait(t, store, readiness.Section, func(st readiness.Status) bool { return st.Warm == warm })
	}
	st := wait(false)
	if st.Models["org/m"].State != nodelabels.StateCold || st.NodeKnown {
		t.Errorf("cold status = %+v", st)
	}
	testWeights.Publish(store, "main")
	st = wait(true)
	if st.Models["org/m"].State != nodelabels.StateWarm || st.Labels["warmd.io/warm"] != "true" {
		t.Errorf("warm status = %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
