package readiness_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/nodewatch"
	"warmd.io/warmd/pkg/readiness"
	"warmd.io/warmd/pkg/state"
)

// TestPartFollowsNodeLabels runs the daemon part: a model whose nodeSelector matches a label the
// node gains gets its label; when the node loses the label the model's label goes away.
func TestPartFollowsNodeLabels(t *testing.T) {
	env := kubeenv.Start(t)
	const name = "readiness-node-part"
	createNode(t, env.Client, name)
	cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: name, Models: []config.Model{
		{Name: "Qwen/Qwen2.5-7B-Instruct", Source: "s3://m/q/"},
		{Name: "big/model", Source: "s3://m/b/", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "big"}}},
	}}
	cfg.Default()
	store := state.New(nil)
	// The daemon's adapter would read the parts' sections; here every wanted model is warm.
	input := func(_ state.Snapshot, c *config.NodeConfig, wants func(config.Model) bool) readiness.Input {
		in := readiness.Input{SKU: "h100"}
		for _, m := range c.Models {
			in.Models = append(in.Models, readiness.ModelInput{Name: m.Name, Wants: wants(m),
				Weights: readiness.WeightsFacts{Revision: m.Revision, VerifiedRevision: m.Revision}})
		}
		return in
	}
	// Built as pkg/assemble builds it: one client from a kubeconfig file, the node watcher other parts
	// hold, then the part.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.Env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := readiness.RESTConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kube.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	view := nodewatch.New(cs, name)
	p, err := readiness.New(daemon.Deps{Config: cfg, Store: store, Kube: cs, Node: view}, readiness.Options{Input: input})
	if err != nil {
		t.Fatalf("part: %v", err)
	}
	if _, ok := p.(*readiness.Part); !ok {
		t.Fatalf("with an API client built %T, want *readiness.Part", p)
	}
	if p.Ready() == nil {
		t.Error("ready before the first write of the Node")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- view.Run(ctx) }()
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("part: %v", err)
			}
		}
	}()

	const bigKey = "models.warmd.io/big--model"
	waitFor(t, "first model's label", func() bool {
		return getNode(t, env.Client, name).Labels["models.warmd.io/Qwen--Qwen2.5-7B-Instruct"] == "warm"
	})
	if _, ok := getNode(t, env.Client, name).Labels[bigKey]; ok {
		t.Fatal("a model whose selector does not match got a label")
	}
	if wanted, known := view.Wants(cfg.Models[1]); wanted || !known {
		t.Errorf("Wants(big/model) = %v, %v before the node label", wanted, known)
	}
	setPool := func(v any) {
		t.Helper()
		b := []byte(`{"metadata":{"labels":{"pool":` + map[bool]string{true: `"big"`, false: `null`}[v != nil] + `}}}`)
		if _, err := env.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setPool("big")
	waitFor(t, "selected model's label", func() bool { return getNode(t, env.Client, name).Labels[bigKey] == "warm" })
	if wanted, _ := view.Wants(cfg.Models[1]); !wanted {
		t.Error("Wants(big/model) false after the node gained pool=big")
	}
	setPool(nil)
	waitFor(t, "deselected model's label removed", func() bool {
		_, ok := getNode(t, env.Client, name).Labels[bigKey]
		return !ok
	})
	if err := p.Ready(); err != nil {
		t.Errorf("not ready after the Node was written: %v", err)
	}
	var st readiness.Status
	waitFor(t, "status section", func() bool {
		s, ok := readiness.Section.Get(store)
		st = s
		return ok && s.LastSync != nil && len(s.Models) == 1
	})
	if !st.Warm || st.Node != name {
		t.Errorf("status %+v", st)
	}
}

// TestStartupTaintFollowsReload: a reload that turns readiness.startupTaint on taints a node that
// was never warm at once, and the taint leaves when the node becomes warm (pkg/assemble's walk of
// every setting names this test). The model's warmth is the config's: the input calls it warm when
// its revision is the one "verified".
func TestStartupTaintFollowsReload(t *testing.T) {
	env := kubeenv.Start(t)
	const name = "readiness-taint-reload"
	createNode(t, env.Client, name)
	cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: name,
		Models: []config.Model{{Name: "org/taint", Source: "s3://m/t/", Revision: "pending"}}}
	cfg.Default()
	input := func(_ state.Snapshot, c *config.NodeConfig, wants func(config.Model) bool) readiness.Input {
		in := readiness.Input{SKU: "h100"}
		for _, m := range c.Models {
			in.Models = append(in.Models, readiness.ModelInput{Name: m.Name, Wants: wants(m),
				Weights: readiness.WeightsFacts{Revision: m.Revision, VerifiedRevision: "verified"}})
		}
		return in
	}
	view := nodewatch.New(env.Client, name)
	part, err := readiness.New(daemon.Deps{Config: cfg, Store: state.New(nil), Kube: env.Client, Node: view}, readiness.Options{Input: input})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := part.(daemon.Reconfigurable)
	if !ok {
		t.Fatalf("the readiness part %T takes no reload", part)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- view.Run(ctx) }()
	go func() { done <- part.Run(ctx) }()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("part: %v", err)
			}
		}
	}()
	tainted := func() bool {
		for _, tt := range getNode(t, env.Client, name).Spec.Taints {
			if tt.Key == nodelabels.TaintCold {
				return true
			}
		}
		return false
	}
	const key = "models.warmd.io/org--taint"
	waitFor(t, "the cold model's label", func() bool { return getNode(t, env.Client, name).Labels[key] == "cold" })
	if tainted() {
		t.Fatal("tainted with readiness.startupTaint off")
	}
	on := *cfg
	on.Readiness.StartupTaint = true
	p.Reconfigure(&on)
	waitFor(t, "the startup taint after the reload turned it on", tainted)
	warm := on
	warm.Models = []config.Model{{Name: "org/taint", Source: "s3://m/t/", Revision: "verified"}}
	p.Reconfigure(&warm)
	waitFor(t, "the taint gone once warm", func() bool { return !tainted() })
	if l := getNode(t, env.Client, name).Labels[key]; l != "warm" {
		t.Errorf("label %q once the taint is gone, want warm", l)
	}
}

// TestWriterBatches sets many inputs in a burst: the writer's MinInterval folds them into a few
// writes, and the Node ends in the last state.
func TestWriterBatches(t *testing.T) {
	env := kubeenv.Start(t)
	const name = "readiness-node-burst"
	createNode(t, env.Client, name)
	cs, count := countingClient(t, env.Config)
	w := readiness.NewWriter(readiness.WriterOptions{NodeName: name, Client: cs, MinInterval: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	const burst = 50
	for i := range burst {
		w.SetInput(input(model("Qwen/Qwen2.5-7B-Instruct", i == burst-1)))
	}
	waitFor(t, "last state", func() bool { return getNode(t, env.Client, name).Labels["warmd.io/warm"] == "true" })
	cancel()
	<-done
	patches := count.get(http.MethodPatch)
	t.Logf("%d inputs → %d PATCH requests", burst, patches)
	if patches >= burst/5 {
		t.Errorf("%d inputs made %d PATCH requests: not batched", burst, patches)
	}
}

// slowPart is an upstream part whose first pass finishes when the test says so.
type slowPart struct{ done atomic.Bool }

func (s *slowPart) Name() string                  { return "slow" }
func (s *slowPart) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (s *slowPart) Ready() error {
	if s.done.Load() {
		return nil
	}
	return errors.New("first pass not done")
}

// TestFirstWriteWaitsForUpstream: on a restart the Node still carries the last run's labels; the first
// write waits for the upstream parts' first pass, so facts not looked at yet never flip the Node; a
// part that never finishes holds the write back only for the grace.
func TestFirstWriteWaitsForUpstream(t *testing.T) {
	env := kubeenv.Start(t)
	for _, tc := range []struct {
		name   string
		finish bool // the upstream part finishes its first pass; else the grace runs out
	}{{"upstream finishes", true}, {"grace runs out", false}} {
		t.Run(tc.name, func(t *testing.T) {
			name := "readiness-first-pass-" + map[bool]string{true: "done", false: "grace"}[tc.finish]
			createNode(t, env.Client, name)
			cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: name,
				Models: []config.Model{{Name: "Qwen/Qwen2.5-7B-Instruct", Source: "s3://m/q/"}}}
			cfg.Default()
			up := &slowPart{}
			// Until the upstream part looked, its facts say cold (as an image part that has not yet
			// listed containerd's images would).
			input := func(_ state.Snapshot, c *config.NodeConfig, wants func(config.Model) bool) readiness.Input {
				in := readiness.Input{SKU: "h100"}
				for _, m := range c.Models {
					mi := readiness.ModelInput{Name: m.Name, Wants: wants(m), Weights: readiness.WeightsFacts{Revision: m.Revision}}
					if up.done.Load() {
						mi.Weights.VerifiedRevision = m.Revision
					}
					in.Models = append(in.Models, mi)
				}
				return in
			}
			view := nodewatch.New(env.Client, name)
			grace := time.Hour
			if !tc.finish {
				grace = 2 * time.Second
			}
			p, err := readiness.New(daemon.Deps{Config: cfg, Store: state.New(nil), Kube: env.Client, Node: view},
				readiness.Options{Input: input, Upstream: []daemon.Part{up}, FirstPassGrace: grace})
			if err != nil {
				t.Fatal(err)
			}
			before := getNode(t, env.Client, name).ResourceVersion
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 2)
			go func() { done <- view.Run(ctx) }()
			go func() { done <- p.Run(ctx) }()
			defer func() {
				cancel()
				for range 2 {
					if err := <-done; err != nil {
						t.Errorf("part: %v", err)
					}
				}
			}()
			waitFor(t, "the wait named in Ready", func() bool {
				err := p.Ready()
				return err != nil && strings.Contains(err.Error(), "waits for the first pass of [slow]")
			})
			if tc.finish {
				time.Sleep(time.Second) // several of the writer's rounds, had it not waited
				if rv := getNode(t, env.Client, name).ResourceVersion; rv != before {
					t.Fatalf("the Node was written (resourceVersion %s → %s) before the upstream part's first pass", before, rv)
				}
				up.done.Store(true)
				waitFor(t, "warm label after the first pass", func() bool {
					return getNode(t, env.Client, name).Labels["models.warmd.io/Qwen--Qwen2.5-7B-Instruct"] == "warm"
				})
			} else {
				waitFor(t, "a write after the grace", func() bool {
					_, ok := getNode(t, env.Client, name).Labels["models.warmd.io/Qwen--Qwen2.5-7B-Instruct"]
					return ok
				})
			}
			waitFor(t, "ready after the first write", func() bool { return p.Ready() == nil })
		})
	}
}
