// Package nodelabels is the Node wire contract: every label, annotation, taint and condition key
// and state value that warmd's node daemon writes and the scheduler extender, `warmd status
// --cluster` and users' selectors read (keys.go), the Labels type every label set warmd computes is
// held in, the one sanitizer that turns a string into a label value, and which keys are warmd's to
// write. It imports nothing of the daemon, so a reader links the words and not the writer; the
// per-model keys are pkg/model's (model.LabelKey). It does no I/O; pkg/readiness writes the Node.
package nodelabels

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"warmd.io/warmd/pkg/model"
)

// Prefix is the prefix of warmd's node-level label and annotation keys. With model.LabelPrefix it is
// everything warmd writes; the ValidatingAdmissionPolicy in manifests/ refuses anything else from
// warmd's ServiceAccount.
const Prefix = "warmd.io/"

// OwnKey reports whether a label or annotation key is one warmd may write.
func OwnKey(k string) bool {
	return strings.HasPrefix(k, Prefix) || strings.HasPrefix(k, model.LabelPrefix)
}

// Labels are label values, merged and diffed as values so a write happens only when something changed.
type Labels map[string]string

// Merge returns a new Labels holding l and then every key of others, later ones winning. It never
// returns nil and never mutates l, so a published set can be copied with l.Merge().
func (l Labels) Merge(others ...Labels) Labels {
	out := maps.Clone(l)
	if out == nil {
		out = Labels{}
	}
	for _, o := range others {
		maps.Copy(out, o)
	}
	return out
}

// Diff returns what must change to turn l (what is there) into next (what should be): labels to set
// (new or changed values) and keys to remove (in l, not in next), sorted. Both are empty when nothing
// changed, so a writer can skip the API call.
func (l Labels) Diff(next Labels) (set Labels, remove []string) {
	set = Labels{}
	for k, v := range next {
		if old, ok := l[k]; !ok || old != v {
			set[k] = v
		}
	}
	for k := range l {
		if _, ok := next[k]; !ok {
			remove = append(remove, k)
		}
	}
	slices.Sort(remove)
	return set, remove
}

// Equal reports whether l and o hold the same keys and values (nil equals empty).
func (l Labels) Equal(o Labels) bool { return maps.Equal(l, o) }

// Own returns the subset of l under warmd's prefixes (OwnKey).
func (l Labels) Own() Labels {
	out := Labels{}
	for k, v := range l {
		if OwnKey(k) {
			out[k] = v
		}
	}
	return out
}

// Validate checks every key and value against the Kubernetes label rules and returns all problems.
func (l Labels) Validate() error {
	var errs []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		for _, e := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Sprintf("label key %q: %s", k, e))
		}
		for _, e := range validation.IsValidLabelValue(l[k]) {
			errs = append(errs, fmt.Sprintf("label %s value %q: %s", k, l[k], e))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid labels (fix the value source or its sanitizing): %s", strings.Join(errs, "; "))
	}
	return nil
}

// Value sanitizes s into a valid label value the way GPU Feature Discovery does for product names
// (so nvidia.com/gpu.product matches GFD's): whitespace runs become '-', other characters outside
// [A-Za-z0-9._-] become '-', the value is cut to 63 characters and must start and end alphanumeric.
// A valid value is returned unchanged.
func Value(s string) string {
	s = strings.Join(strings.Fields(s), "-")
	b := []byte(s)
	for i, c := range b {
		if !valueChar(c) {
			b[i] = '-'
		}
	}
	s = strings.Trim(string(b), "-._")
	if len(s) > validation.LabelValueMaxLength {
		s = strings.Trim(s[:validation.LabelValueMaxLength], "-._")
	}
	return s
}

func valueChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}
