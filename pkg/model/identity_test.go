package model

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ids are valid model ids of every shape: with and without namespace, upper and lower case, dots,
// underscores, the longest parts the Hub allows.
var ids = []string{
	"Qwen/Qwen2.5-7B-Instruct", "gpt2", "meta-llama/Llama-3.1-8B-Instruct", "mistralai/Mistral-7B-v0.3_ft",
	"a/b", "A/B", "x.y/z_w", strings.Repeat("o", MaxPartLen) + "/" + strings.Repeat("n", MaxPartLen),
}

// TestIdentityForms: every form of a valid id is derived with the same "/" → "--" rule, and each
// reverses to the id (the slug up to case, the label key when it is readable).
func TestIdentityForms(t *testing.T) {
	for _, id := range ids {
		t.Run(id[:min(len(id), 30)], func(t *testing.T) {
			dir, err := DirName(id)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := NameFromDir(dir); err != nil || back != id {
				t.Errorf("NameFromDir(%q) = %q, %v", dir, back, err)
			}
			slug, err := Slug(id)
			if err != nil {
				t.Fatal(err)
			}
			if slug != strings.ToLower(strings.TrimPrefix(dir, "models--")) {
				t.Errorf("Slug %q is not the dir name %q lower-cased", slug, dir)
			}
			if back, err := NameFromSlug(slug); err != nil || back != strings.ToLower(id) {
				t.Errorf("NameFromSlug(%q) = %q, %v, want %q", slug, back, err, strings.ToLower(id))
			}
			key := LabelKey(id)
			if errs := validation.IsQualifiedName(key); len(errs) > 0 {
				t.Fatalf("LabelKey(%q) = %q: %v", id, key, errs)
			}
			back, ok := NameFromLabelKey(key)
			if len(id) <= 62 { // readable: the dir name's tail under the label prefix, and reversible
				if !ok || back != id || key != LabelPrefix+strings.TrimPrefix(dir, "models--") {
					t.Errorf("NameFromLabelKey(%q) = %q, %v; want %q from the dir name %q", key, back, ok, id, dir)
				}
			} else if ok && LabelKey(back) != key { // a hashed key may read as another (short) id: exactly that one's key
				t.Errorf("NameFromLabelKey(%q) = %q, whose key is %q", key, back, LabelKey(back))
			}
		})
	}
}

// TestIdentityFormsAreCollisionFree: distinct ids get distinct dir names and label keys; slugs are
// distinct unless the ids differ only in case, which SameModel calls one model (and config refuses).
func TestIdentityFormsAreCollisionFree(t *testing.T) {
	all := append(ids, "qwen/qwen2.5-7b-instruct", "org/model", "org/model-name", "org/model_name", "org/model.name", "org-model")
	dirs, slugs, keys := map[string]string{}, map[string]string{}, LabelKeys(all)
	seenKeys := map[string]string{}
	for _, id := range all {
		d, _ := DirName(id)
		if o, dup := dirs[d]; dup {
			t.Errorf("%q and %q share dir %q", id, o, d)
		}
		dirs[d] = id
		s, _ := Slug(id)
		if o, dup := slugs[s]; dup && !SameModel(id, o) {
			t.Errorf("%q and %q share slug %q but are not the same model", id, o, s)
		}
		slugs[s] = id
		if o, dup := seenKeys[keys[id]]; dup {
			t.Errorf("%q and %q share label key %q", id, o, keys[id])
		}
		seenKeys[keys[id]] = id
	}
	// A long id's hashed key is spelled like the readable key of a short id; as a set they still differ.
	long := "org/" + strings.Repeat("x", 80)
	lookalike, _ := NameFromLabelKey(LabelKey(long))
	if lookalike == "" || ValidateName(lookalike) != nil {
		t.Fatalf("no valid look-alike id for %q", LabelKey(long))
	}
	if pair := LabelKeys([]string{long, lookalike}); pair[long] == pair[lookalike] || pair[lookalike] != LabelKey(lookalike) {
		t.Errorf("LabelKeys(%q, %q) = %v: want distinct keys, the readable one kept", long, lookalike, pair)
	}
	if !SameModel("Qwen/Qwen2.5-7B-Instruct", "qwen/qwen2.5-7b-instruct") || SameModel("org/a", "org/b") ||
		SameModel("org/a b", "org/A B") {
		t.Error("SameModel: ids equal up to case are one model; invalid ids compare exactly")
	}
}

// TestReverseRefusesForeignNames: a slug, dir or label key no valid id produces reads back as nothing,
// so a planted dir or a foreign label is never taken for a model.
func TestReverseRefusesForeignNames(t *testing.T) {
	for _, slug := range []string{"", "Qwen--x", "a--b--c", "-a", "a/b", "..", "a--"} {
		if n, err := NameFromSlug(slug); err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("NameFromSlug(%q) = %q, %v; want ErrInvalid", slug, n, err)
		}
	}
	for _, key := range []string{"warmd.io/warm", "models.warmd.io/a--b--c", "models.warmd.io/", "models.warmd.io/-a", "models.warmd.io/a b"} {
		if n, ok := NameFromLabelKey(key); ok {
			t.Errorf("NameFromLabelKey(%q) = %q, want not readable", key, n)
		}
	}
}
