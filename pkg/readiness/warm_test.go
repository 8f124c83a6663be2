package readiness

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"warmd.io/warmd/pkg/nodelabels"
)

// warmModel returns a model whose every part is verified.
func warmModel(name string) ModelInput {
	return ModelInput{
		Name: name, Wants: true,
		Image:   ImageFacts{Ref: "vllm/vllm-openai:v0.11.0", Digest: "sha256:aaaa", Pinned: true},
		Weights: WeightsFacts{Revision: "abc123", VerifiedRevision: "abc123", Path: "/var/lib/warmd/weights/x"},
		Cache:   CacheFacts{Present: true},
	}
}

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name    string
		mut     func(*ModelInput)
		noCache bool
		want    nodelabels.State
		missing string
	}{
		{"everything verified", func(*ModelInput) {}, false, nodelabels.StateWarm, ""},
		{"nothing", func(m *ModelInput) {
			m.Image.Digest, m.Image.Pinned, m.Weights.VerifiedRevision, m.Cache.Present = "", false, "", false
		}, false, nodelabels.StateCold, "not pulled"},
		{"image only", func(m *ModelInput) { m.Weights.VerifiedRevision, m.Cache.Present = "", false }, false, nodelabels.StateImage, "weights at revision abc123"},
		{"weights without image", func(m *ModelInput) { m.Image.Digest = "" }, false, nodelabels.StateWeights, "not pulled"},
		{"no compile cache", func(m *ModelInput) { m.Cache.Present = false }, false, nodelabels.StateWeights, "compile cache for h100-80gb"},
		{"compile cache off", func(m *ModelInput) { m.Cache.Present = false }, true, nodelabels.StateWarm, ""},
		{"image evicted", func(m *ModelInput) { m.Image.Digest = "" }, true, nodelabels.StateWeights, "not pulled"},
		{"image unpinned", func(m *ModelInput) { m.Image.Pinned = false }, false, nodelabels.StateWeights, "not pinned"},
		{"old revision on disk", func(m *ModelInput) { m.Weights.VerifiedRevision = "old" }, false, nodelabels.StateImage, "on disk: old"},
		{"no image needed", func(m *ModelInput) { m.Image = ImageFacts{} }, false, nodelabels.StateWarm, ""},
		{"weights failed", func(m *ModelInput) { m.Weights.Error = "sha256 mismatch in model.safetensors" }, false, nodelabels.StateFailed, ""},
		{"image failed", func(m *ModelInput) { m.Image.Error = "401 unauthorized" }, false, nodelabels.StateFailed, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := warmModel("org/m")
			tc.mut(&m)
			got := Evaluate(Input{SKU: "h100-80gb", CompileCacheEnabled: !tc.noCache, Models: []ModelInput{m}})
			if len(got) != 1 {
				t.Fatalf("got %d states", len(got))
			}
			if got[0].State != tc.want {
				t.Fatalf("state %s, want %s (missing %v, reason %q)", got[0].State, tc.want, got[0].Missing, got[0].Reason)
			}
			if tc.missing != "" && !strings.Contains(strings.Join(got[0].Missing, "; "), tc.missing) {
				t.Errorf("missing %v does not mention %q", got[0].Missing, tc.missing)
			}
			if tc.want == nodelabels.StateFailed && got[0].Reason == "" {
				t.Error("failed without a reason")
			}
		})
	}
}

func TestEvaluateSkipsUnwanted(t *testing.T) {
	b := warmModel("b")
	c := warmModel("c")
	c.Wants = false
	got := Evaluate(Input{Models: []ModelInput{b, warmModel("a"), c}})
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("got %+v, want a and b in order", got)
	}
	if !AllWarm(got) || !AllWarm(nil) {
		t.Error("AllWarm wrong")
	}
}

func TestBuild(t *testing.T) {
	cold := warmModel("meta-llama/Llama-3.1-8B-Instruct")
	cold.Weights.VerifiedRevision = ""
	in := Input{
		SKU:                 "h100-sxm-80gb",
		CompileCacheEnabled: true,
		IdentityLabels:      map[string]string{"warmd.io/gpu.count": "8", "nvidia.com/gpu.product": "H100", "warmd.io/bad key": "x"},
		Models:              []ModelInput{warmModel("Qwen/Qwen2.5-7B-Instruct"), cold, {Name: "other/unwanted"}},
	}
	d := Build(in, false, 0)
	want := nodelabels.Labels{
		"warmd.io/gpu.sku":                                  "h100-sxm-80gb",
		"warmd.io/gpu.count":                                "8",
		"warmd.io/warm":                                     "false",
		"models.warmd.io/Qwen--Qwen2.5-7B-Instruct":         "warm",
		"models.warmd.io/meta-llama--Llama-3.1-8B-Instruct": "image",
	}
	if !d.Labels.Equal(want) {
		t.Errorf("labels\n got %v\nwant %v", d.Labels, want)
	}
	if d.Warm || d.EverWarm {
		t.Error("cold node reported warm")
	}
	if d.Condition.Status != corev1.ConditionFalse || d.Condition.Reason != "ModelsNotWarm" ||
		!strings.Contains(d.Condition.Message, "meta-llama/Llama-3.1-8B-Instruct is image, missing weights at revision abc123") {
		t.Errorf("condition %+v", d.Condition)
	}
	st := ParseStatus(d.Annotations)
	if st.Version != 1 || st.Models["Qwen/Qwen2.5-7B-Instruct"].State != nodelabels.StateWarm || st.SKU != "h100-sxm-80gb" {
		t.Errorf("status annotation %s", d.Annotations[nodelabels.AnnotationStatus])
	}

	in.Models[1] = warmModel("meta-llama/Llama-3.1-8B-Instruct")
	d = Build(in, false, 0)
	if !d.Warm || !d.EverWarm || d.Labels[nodelabels.LabelWarm] != "true" || d.Condition.Status != corev1.ConditionTrue {
		t.Errorf("warm node: warm=%v everWarm=%v labels=%v cond=%+v", d.Warm, d.EverWarm, d.Labels, d.Condition)
	}
	if d := Build(Input{}, false, 0); !d.Warm || d.Condition.Reason != "NoModelsWanted" {
		t.Errorf("node with no models: %+v", d.Condition)
	}
}

func TestStatusAnnotationCapped(t *testing.T) {
	var models []ModelInput
	for i := range 200 {
		m := warmModel(fmt.Sprintf("org/model-%03d", i))
		m.Weights.Error = strings.Repeat("a long failure message ", 10)
		models = append(models, m)
	}
	for _, limit := range []int{4096, 1024, 100} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			d := Build(Input{Models: models}, false, limit)
			raw := d.Annotations[nodelabels.AnnotationStatus]
			if len(raw) > limit {
				t.Fatalf("annotation is %d bytes, cap %d", len(raw), limit)
			}
			var s StatusSummary
			if err := json.Unmarshal([]byte(raw), &s); err != nil {
				t.Fatalf("not JSON: %v: %s", err, raw)
			}
			if !s.Trimmed || len(s.Models)+s.Omitted != 200 {
				t.Errorf("trimmed=%v models=%d omitted=%d", s.Trimmed, len(s.Models), s.Omitted)
			}
		})
	}
}
