package readiness

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestModelLabelKey(t *testing.T) {
	long := "some-org/" + strings.Repeat("very-long-model-name-", 6) + "7B"
	tests := []struct {
		name, model, want string
	}{
		{"hf id", "Qwen/Qwen2.5-7B-Instruct", "models.warmd.io/Qwen--Qwen2.5-7B-Instruct"},
		{"no org", "gpt2", "models.warmd.io/gpt2"},
		{"underscores and dots", "mistralai/Mistral-7B-v0.3_ft", "models.warmd.io/mistralai--Mistral-7B-v0.3_ft"},
		{"odd characters", "org/model name+v2", ""},
		{"double dash is lossy", "org--x/y", ""},
		{"two slashes", "a/b/c", ""},
		{"leading dash", "-org/m", ""},
		{"unicode", "org/modèle-ü", ""},
		{"only odd", "///", ""},
		{"too long", long, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ModelLabelKey(tc.model)
			if errs := validation.IsQualifiedName(got); len(errs) != 0 {
				t.Fatalf("ModelLabelKey(%q) = %q, not a valid label key: %v", tc.model, got, errs)
			}
			if !strings.HasPrefix(got, ModelPrefix) {
				t.Fatalf("ModelLabelKey(%q) = %q lacks prefix %s", tc.model, got, ModelPrefix)
			}
			if tc.want != "" && got != tc.want {
				t.Fatalf("ModelLabelKey(%q) = %q, want %q", tc.model, got, tc.want)
			}
			if tc.want == "" && ModelLabelKey(tc.model+"x") == got {
				t.Fatalf("lossy key %q does not depend on the whole id", got)
			}
			if again := ModelLabelKey(tc.model); again != got {
				t.Fatalf("not stable: %q then %q", got, again)
			}
		})
	}
}

func TestModelLabelKeysCollisions(t *testing.T) {
	long := strings.Repeat("x", 80)
	names := []string{
		"org/model", "org--model", // lossless vs lossy spelling of the same key
		"org/model name", "org/model-name", "org/model_name",
		long + "a", long + "b", // same truncated prefix
		"a/b/c", "a--b--c",
	}
	keys := ModelLabelKeys(names)
	seen := map[string]string{}
	for _, n := range names {
		k := keys[n]
		if errs := validation.IsQualifiedName(k); len(errs) != 0 {
			t.Errorf("%q → %q: invalid key: %v", n, k, errs)
		}
		if other, dup := seen[k]; dup {
			t.Errorf("%q and %q share key %q", n, other, k)
		}
		seen[k] = n
	}
	if keys["org/model"] != "models.warmd.io/org--model" {
		t.Errorf("readable id lost its readable key: %q", keys["org/model"])
	}
}

func TestLabelValue(t *testing.T) {
	for _, in := range []string{"h100-80gb-sm90", "NVIDIA H100 80GB HBM3", strings.Repeat("a", 70), "-x-", "!!!", ""} {
		t.Run(in, func(t *testing.T) {
			got := LabelValue(in)
			if errs := validation.IsValidLabelValue(got); len(errs) != 0 {
				t.Fatalf("LabelValue(%q) = %q: invalid: %v", in, got, errs)
			}
			if len(validation.IsValidLabelValue(in)) == 0 && got != in {
				t.Fatalf("valid value %q changed to %q", in, got)
			}
		})
	}
}

func TestLabelsMergeDiff(t *testing.T) {
	a := Labels{"warmd.io/warm": "false", "models.warmd.io/m": "cold"}
	b := a.Merge(Labels{"warmd.io/warm": "true"}, Labels{"warmd.io/gpu.sku": "h100"})
	if a["warmd.io/warm"] != "false" {
		t.Fatal("Merge mutated its receiver")
	}
	set, remove := b.Diff(map[string]string{"warmd.io/warm": "false", "models.warmd.io/gone": "warm", "models.warmd.io/m": "cold"})
	if len(set) != 2 || set["warmd.io/warm"] != "true" || set["warmd.io/gpu.sku"] != "h100" {
		t.Errorf("set = %v", set)
	}
	if len(remove) != 1 || remove[0] != "models.warmd.io/gone" {
		t.Errorf("remove = %v", remove)
	}
	if !b.Equal(map[string]string(b.Merge())) || b.Equal(a) {
		t.Error("Equal is wrong")
	}
	own := Labels{"warmd.io/x": "1", "models.warmd.io/y": "warm", "nvidia.com/gpu.product": "H100"}.Own()
	if len(own) != 2 {
		t.Errorf("Own kept foreign keys: %v", own)
	}
}
