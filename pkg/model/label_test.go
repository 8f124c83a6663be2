package model

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestLabelKey(t *testing.T) {
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
			got := LabelKey(tc.model)
			if errs := validation.IsQualifiedName(got); len(errs) != 0 {
				t.Fatalf("LabelKey(%q) = %q, not a valid label key: %v", tc.model, got, errs)
			}
			if !strings.HasPrefix(got, LabelPrefix) {
				t.Fatalf("LabelKey(%q) = %q lacks prefix %s", tc.model, got, LabelPrefix)
			}
			if tc.want != "" && got != tc.want {
				t.Fatalf("LabelKey(%q) = %q, want %q", tc.model, got, tc.want)
			}
			if tc.want == "" && LabelKey(tc.model+"x") == got {
				t.Fatalf("lossy key %q does not depend on the whole id", got)
			}
			if again := LabelKey(tc.model); again != got {
				t.Fatalf("not stable: %q then %q", got, again)
			}
		})
	}
}

func TestLabelKeysCollisions(t *testing.T) {
	long := strings.Repeat("x", 80)
	names := []string{
		"org/model", "org--model", // lossless vs lossy spelling of the same key
		"org/model name", "org/model-name", "org/model_name",
		long + "a", long + "b", // same truncated prefix
		"a/b/c", "a--b--c",
	}
	keys := LabelKeys(names)
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
