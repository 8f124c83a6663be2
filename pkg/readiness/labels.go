package readiness

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
)

// Names warmd publishes on its Node. Everything it writes is under one of the two prefixes; the
// ValidatingAdmissionPolicy in manifests/ refuses anything else from warmd's ServiceAccount.
const (
	// Prefix is the label/annotation prefix of node-level keys.
	Prefix = "warmd.io/"
	// ModelPrefix is the prefix of per-model label keys: models.warmd.io/<sanitized model name>.
	ModelPrefix = "models.warmd.io/"

	LabelSKU  = "warmd.io/gpu.sku"
	LabelWarm = "warmd.io/warm"
	// AnnotationStatus holds the compact JSON summary (see StatusSummary).
	AnnotationStatus = "warmd.io/status"
	// TaintCold is the optional startup taint, removed once the node is warm.
	TaintCold = "warmd.io/cold"
	// ConditionType is the Node condition warmd owns.
	ConditionType = "WarmdReady"
	// FieldManager is the server-side-apply field manager of every warmd write.
	FieldManager = "warmd"
)

// OwnKey reports whether a label or annotation key is one warmd may write.
func OwnKey(k string) bool { return strings.HasPrefix(k, Prefix) || strings.HasPrefix(k, ModelPrefix) }

// Labels are label values, merged and diffed as values so a write happens only when something changed.
type Labels map[string]string

// Merge returns a new Labels holding l and then every key of others, later ones winning.
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

// Diff returns what must change to turn have into l: keys to set (new or different values) and keys
// to remove (in have, not in l).
func (l Labels) Diff(have map[string]string) (set Labels, remove []string) {
	set = Labels{}
	for k, v := range l {
		if hv, ok := have[k]; !ok || hv != v {
			set[k] = v
		}
	}
	for k := range have {
		if _, ok := l[k]; !ok {
			remove = append(remove, k)
		}
	}
	slices.Sort(remove)
	return set, remove
}

// Equal reports whether l and o hold the same keys and values (nil equals empty).
func (l Labels) Equal(o map[string]string) bool { return maps.Equal(map[string]string(l), o) }

// Own returns the subset of l under warmd's prefixes.
func (l Labels) Own() Labels {
	out := Labels{}
	for k, v := range l {
		if OwnKey(k) {
			out[k] = v
		}
	}
	return out
}

var (
	// hfSegment is one segment of a lossless model id: it starts and ends alphanumeric and has no "--",
	// so "org/name" → "org--name" can be split back at the only "--".
	hfSegment  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	notNameChr = regexp.MustCompile(`[^A-Za-z0-9._-]+`)
)

// nameMax is the longest name part of a qualified label key.
const nameMax = 63

// ModelLabelKey maps one model id to its label key. Ids that are valid Hugging Face ids and short
// enough map readably and reversibly, the way the HF cache names dirs: "Qwen/Qwen2.5-7B-Instruct" →
// "models.warmd.io/Qwen--Qwen2.5-7B-Instruct". Anything else (odd characters, "--", too long) is
// sanitized and suffixed with a hash of the id, so two ids never share a key by accident. Use
// ModelLabelKeys for a set of ids: it also resolves the (astronomically unlikely) hash collisions.
func ModelLabelKey(name string) string { return ModelPrefix + modelKeyName(name, 8) }

func modelKeyName(name string, hashLen int) string {
	if lossless(name) {
		return strings.Replace(name, "/", "--", 1)
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:])[:hashLen]
	s := notNameChr.ReplaceAllString(strings.ReplaceAll(name, "/", "--"), "-")
	s = strings.Trim(s, "-_.")
	if max := nameMax - len(h) - 1; len(s) > max {
		s = strings.TrimRight(s[:max], "-_.")
	}
	if s == "" {
		return "model-" + h
	}
	return s + "-" + h
}

func lossless(name string) bool {
	segs := strings.Split(name, "/")
	if len(segs) > 2 || len(name)+len(segs)-1 > nameMax {
		return false
	}
	for _, s := range segs {
		if !hfSegment.MatchString(s) || strings.Contains(s, "--") {
			return false
		}
	}
	return true
}

// ModelLabelKeys maps every id to a distinct valid label key. Ids whose keys collide get a longer
// hash until they do not; the mapping of an id does not depend on which other ids exist unless they
// collide.
func ModelLabelKeys(names []string) map[string]string {
	out := make(map[string]string, len(names))
	byKey := map[string][]string{}
	for _, n := range names {
		k := ModelLabelKey(n)
		out[n] = k
		byKey[k] = append(byKey[k], n)
	}
	var colliding []string
	for k, group := range byKey {
		if len(group) > 1 {
			colliding = append(colliding, k)
		}
	}
	slices.Sort(colliding)
	for _, k := range colliding {
		group := slices.Clone(byKey[k])
		slices.Sort(group)
		// A lossless id keeps its readable key; the others move to a 16-hex-digit hash, then 32.
		for _, n := range group {
			if lossless(n) {
				continue
			}
			for _, hl := range []int{16, 32} {
				k := ModelPrefix + modelKeyName(n, hl)
				if _, taken := byKey[k]; !taken {
					out[n] = k
					byKey[k] = []string{n}
					break
				}
			}
		}
	}
	return out
}

// LabelValue turns s into a valid label value: characters outside [A-Za-z0-9._-] become "-", the ends
// are trimmed to alphanumerics, and values over 63 characters are cut and suffixed with a hash.
func LabelValue(s string) string {
	if len(content.IsLabelValue(s)) == 0 {
		return s
	}
	v := strings.Trim(notNameChr.ReplaceAllString(s, "-"), "-_.")
	if len(v) > nameMax || v != s {
		sum := sha256.Sum256([]byte(s))
		h := hex.EncodeToString(sum[:])[:8]
		if max := nameMax - len(h) - 1; len(v) > max {
			v = strings.TrimRight(v[:max], "-_.")
		}
		if v == "" {
			return h
		}
		v += "-" + h
	}
	return v
}
