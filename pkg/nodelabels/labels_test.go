package nodelabels

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestLabelsValidate(t *testing.T) {
	tests := []struct {
		name string
		l    Labels
		bad  string
	}{
		{"good", Labels{"warmd.io/gpu.sku": "nvidia-h100.sm90-0123abcd"}, ""},
		{"value too long", Labels{"warmd.io/x": strings.Repeat("a", 64)}, "warmd.io/x"},
		{"value with space", Labels{"warmd.io/x": "a b"}, "warmd.io/x"},
		{"bad key", Labels{"warmd.io/": "x"}, "warmd.io/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.Validate()
			if (err != nil) != (tt.bad != "") || (err != nil && !strings.Contains(err.Error(), tt.bad)) {
				t.Errorf("Validate() = %v, want error naming %q", err, tt.bad)
			}
		})
	}
}

func TestValueSanitizing(t *testing.T) {
	for _, in := range []string{"NVIDIA H100 80GB HBM3", "  x  ", "-a-", "ä/ö\\ü", strings.Repeat("ab ", 40), "...", "Tesla T4"} {
		out := Value(in)
		if err := (Labels{"warmd.io/x": out}).Validate(); err != nil {
			t.Errorf("Value(%q) = %q: %v", in, out, err)
		}
	}
	if got := Value("NVIDIA H100 80GB HBM3"); got != "NVIDIA-H100-80GB-HBM3" {
		t.Errorf("GFD-style product %q", got)
	}
}

func TestLabelsMergeDiffOwn(t *testing.T) {
	a := Labels{"warmd.io/warm": "false", "models.warmd.io/m": "cold"}
	b := a.Merge(Labels{"warmd.io/warm": "true"}, Labels{"warmd.io/gpu.sku": "h100"})
	if a["warmd.io/warm"] != "false" {
		t.Fatal("Merge mutated its receiver")
	}
	// Diff goes from what is there (the receiver) to what should be (the argument).
	have := Labels{"warmd.io/warm": "false", "models.warmd.io/gone": "warm", "models.warmd.io/m": "cold"}
	set, remove := have.Diff(b)
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

func TestLabelsDiffFromOldToNext(t *testing.T) {
	old := Labels{"a": "1", "b": "2", "c": "3"}
	next := old.Merge(Labels{"b": "20", "d": "4"})
	delete(next, "c")
	if old["b"] != "2" {
		t.Fatal("Merge mutated its receiver")
	}
	set, remove := old.Diff(next)
	if !maps.Equal(set, Labels{"b": "20", "d": "4"}) || !slices.Equal(remove, []string{"c"}) {
		t.Errorf("Diff = %v, %v", set, remove)
	}
	set, remove = next.Diff(next.Merge(nil))
	if len(set) != 0 || len(remove) != 0 || !next.Equal(next.Merge(nil)) {
		t.Errorf("Diff of equal sets = %v, %v", set, remove)
	}
	if got := Labels(nil).Merge(Labels{"x": "1"}); got["x"] != "1" {
		t.Errorf("nil Merge = %v", got)
	}
}

// TestValueKeepsValidValues: a value that is already valid is published as is (the SKU key, counts,
// versions), whatever the sanitizing does to others.
func TestValueKeepsValidValues(t *testing.T) {
	for _, in := range []string{"h100-80gb-sm90", "NVIDIA H100 80GB HBM3", strings.Repeat("a", 70), "-x-", "!!!", ""} {
		t.Run(in, func(t *testing.T) {
			got := Value(in)
			if errs := validation.IsValidLabelValue(got); len(errs) != 0 {
				t.Fatalf("Value(%q) = %q: invalid: %v", in, got, errs)
			}
			if len(validation.IsValidLabelValue(in)) == 0 && got != in {
				t.Fatalf("valid value %q changed to %q", in, got)
			}
		})
	}
}
