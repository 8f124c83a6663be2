package fromstate

import (
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/compilekey"
	"warmd.io/warmd/pkg/compilekey/check"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/predict"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/readiness"
	"warmd.io/warmd/pkg/state"
)

const sku = "nvidia-h100-80gb-hbm3.sm90.cuda12.8.drv570-3f9a1c2e"

func cfg(t *testing.T) *config.NodeConfig {
	t.Helper()
	c, err := config.Parse([]byte(`apiVersion: warmd.io/v1alpha1
kind: NodeConfig
nodeName: n1
models:
- {name: org/a, source: 's3://b/a/', image: 'reg.local/vllm:1'}
- {name: org/b, source: 's3://b/b/', nodeSelector: {matchLabels: {pool: b}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func snapshot(sections map[string]any) state.Snapshot {
	return state.Snapshot{Version: 1, Sections: sections}
}

func gpu() nvml.Status {
	return nvml.Status{Inventory: nvml.Inventory{Present: true, SKU: sku}, Cacheable: true,
		Labels: nodelabels.Labels{"warmd.io/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
}

func TestEverythingVerifiedIsWarmAndPredicted(t *testing.T) {
	c := cfg(t)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	total := 66.5
	snap := snapshot(map[string]any{
		nvml.Section.Name(): gpu(),
		prefetch.ImagesSection.Name(): prefetch.ImagesStatus{Images: []prefetch.ImageStatus{{Ref: "reg.local/vllm:1", Models: []string{"org/a"},
			State: prefetch.StateReady, Digest: "sha256:aa", Pinned: true, TotalBytes: 9 << 30}}},
		prefetch.WeightsSection.Name(): prefetch.WeightsStatus{Models: []prefetch.ModelStatus{{Model: "org/a", Revision: "main", State: prefetch.StateReady,
			SnapshotPath: "/w/snap", BytesTotal: 16 << 30, Started: start, Finished: start.Add(16 * time.Second)}}},
		cache.Section.Name(): cache.Status{State: cache.StateReady, SKU: sku, Bytes: 1 << 30},
		phases.Section.Name(): phases.Status{Records: []phases.Record{{Model: "org/a", GPUSKU: sku,
			Result: phases.Result{Outcome: phases.OutcomeReady, CompileCache: phases.CacheHit, TotalSeconds: &total}}}},
	})
	in := Input(snap, c, func(m config.Model) bool { return m.NodeSelector == nil })
	states := readiness.Evaluate(in)
	if len(states) != 1 || states[0].Name != "org/a" || states[0].State != nodelabels.StateWarm {
		t.Fatalf("states = %+v, want org/a warm and org/b not wanted", states)
	}
	if in.SKU != sku || !in.CompileCacheEnabled || in.IdentityLabels["warmd.io/gpu.product"] == "" {
		t.Errorf("gpu facts not carried: %+v", in)
	}
	if !in.Models[0].LastStart.CacheHit {
		t.Error("last start's cache hit lost")
	}
	sec, ok := in.Predictions.Seconds["org/a"]
	if !ok || sec <= 0 {
		t.Fatalf("no prediction for org/a: %+v", in.Predictions)
	}
	if _, ok := in.Predictions.Seconds["org/b"]; ok {
		t.Error("a model this node does not want got a prediction")
	}
	got, err := predict.ParseAnnotation(in.Predictions.Annotation)
	if err != nil || got["org/a"] < sec-1 || got["org/a"] > sec+1 {
		t.Errorf("annotation %q does not carry %v s: %v", in.Predictions.Annotation, sec, err)
	}
}

func TestFailuresAndGapsAreNotWarm(t *testing.T) {
	c := cfg(t)
	tests := []struct {
		name     string
		sections map[string]any
		want     nodelabels.State
		reason   string
	}{
		{"nothing yet", map[string]any{nvml.Section.Name(): gpu()}, nodelabels.StateCold, ""},
		{"image failed", map[string]any{nvml.Section.Name(): gpu(), prefetch.ImagesSection.Name(): prefetch.ImagesStatus{Images: []prefetch.ImageStatus{
			{Ref: "reg.local/vllm:1", Models: []string{"org/a"}, State: prefetch.StateFailed, Reason: "not found"}}}},
			nodelabels.StateFailed, "the image is not in the registry"},
		{"weights of another revision", map[string]any{nvml.Section.Name(): gpu(), prefetch.WeightsSection.Name(): prefetch.WeightsStatus{Models: []prefetch.ModelStatus{
			{Model: "org/a", Revision: "old", State: prefetch.StateReady, SnapshotPath: "/w/old"}}}}, nodelabels.StateCold, ""},
		{"cache of another SKU", map[string]any{nvml.Section.Name(): gpu(),
			prefetch.ImagesSection.Name():  prefetch.ImagesStatus{Images: []prefetch.ImageStatus{{Ref: "reg.local/vllm:1", Models: []string{"org/a"}, State: prefetch.StateReady, Digest: "sha256:aa", Pinned: true}}},
			prefetch.WeightsSection.Name(): prefetch.WeightsStatus{Models: []prefetch.ModelStatus{{Model: "org/a", Revision: "main", State: prefetch.StateReady, SnapshotPath: "/w/s"}}},
			cache.Section.Name():           cache.Status{State: cache.StateReady, SKU: "other"}}, nodelabels.StateWeights, ""},
		{"unpinned image", map[string]any{nvml.Section.Name(): gpu(), prefetch.ImagesSection.Name(): prefetch.ImagesStatus{Images: []prefetch.ImageStatus{
			{Ref: "reg.local/vllm:1", Models: []string{"org/a"}, State: prefetch.StateReady, Digest: "sha256:aa", Pinned: false}}}}, nodelabels.StateCold, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			states := readiness.Evaluate(Input(snapshot(tc.sections), c, func(m config.Model) bool { return m.NodeSelector == nil }))
			if len(states) != 1 || states[0].State != tc.want || !strings.Contains(states[0].Reason, tc.reason) {
				t.Fatalf("states = %+v, want %s (%q)", states, tc.want, tc.reason)
			}
		})
	}
}

func TestNoGPUNeedsNoCompileCache(t *testing.T) {
	c := cfg(t)
	snap := snapshot(map[string]any{
		nvml.Section.Name(): nvml.Status{Inventory: nvml.Inventory{SKU: nvml.SKUNone}},
		prefetch.ImagesSection.Name(): prefetch.ImagesStatus{Images: []prefetch.ImageStatus{{Ref: "reg.local/vllm:1", Models: []string{"org/a"},
			State: prefetch.StateReady, Digest: "sha256:aa", Pinned: true}}},
		prefetch.WeightsSection.Name(): prefetch.WeightsStatus{Models: []prefetch.ModelStatus{{Model: "org/a", Revision: "main", State: prefetch.StateReady, SnapshotPath: "/w/s"}}},
	})
	in := Input(snap, c, nil)
	if in.CompileCacheEnabled || in.SKU != "" {
		t.Fatalf("a node without a cacheable SKU must not wait for compile caches: %+v", in)
	}
	for _, s := range readiness.Evaluate(in) {
		if s.Name == "org/a" && s.State != nodelabels.StateWarm {
			t.Errorf("org/a = %+v, want warm", s)
		}
	}
}

// TestKeyCheckDecidesTheCacheOutcome: a pod of the model bound here, not started, predicted a miss by
// the compile-cache key check turns the prediction's compileCache into a miss with the reason, even
// with a synced cache on disk, and the predicted seconds grow by the compile.
func TestKeyCheckDecidesTheCacheOutcome(t *testing.T) {
	c := cfg(t)
	sections := map[string]any{
		nvml.Section.Name():  gpu(),
		cache.Section.Name(): cache.Status{State: cache.StateReady, SKU: sku, Bytes: 1 << 30},
	}
	wants := func(m config.Model) bool { return m.NodeSelector == nil }
	before := Input(snapshot(sections), c, wants)
	if p := before.Predictions.Detail.Predictions[0]; p.Cache != phases.CacheHit || p.CacheReason != "" {
		t.Fatalf("without a check: %+v", p)
	}
	sections[check.Section.Name()] = check.Status{Pending: []check.Check{{Pod: "ml/p", Model: "org/a", Predicted: compilekey.Miss,
		Differs: []string{compilekey.InTP}, Reason: "differs from the node's cached starts in: tensorParallelSize"}}}
	after := Input(snapshot(sections), c, wants)
	p := after.Predictions.Detail.Predictions[0]
	if p.Cache != phases.CacheMiss || !strings.Contains(p.CacheReason, "tensorParallelSize") {
		t.Fatalf("with a miss predicted: %+v", p)
	}
	if after.Predictions.Seconds["org/a"] <= before.Predictions.Seconds["org/a"] {
		t.Errorf("a miss predicts %v s, a hit %v s: the compile must cost time", after.Predictions.Seconds["org/a"], before.Predictions.Seconds["org/a"])
	}
}
