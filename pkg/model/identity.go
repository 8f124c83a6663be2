package model

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
)

// The names a model goes by besides its id. Each is derived here and only here:
//
//	id        Qwen/Qwen2.5-7B-Instruct
//	DirName   models--Qwen--Qwen2.5-7B-Instruct      (HF hub cache dir; NameFromDir reverses it)
//	Slug      qwen--qwen2.5-7b-instruct              (per-model compile-cache dir; NameFromSlug)
//	LabelKey  models.warmd.io/Qwen--Qwen2.5-7B-Instruct (Node label; NameFromLabelKey)
//
// "/" always becomes "--", which a valid id never holds, so each form is unambiguous. The slug is lower
// case (it is the VLLM_CACHE_ROOT users write into their Deployments), so two ids that differ only in
// case share it: the Hub treats such ids as one repo, and config validation refuses them as one model
// (SameModel).

// LabelPrefix is the prefix of per-model Node label keys: models.warmd.io/<LabelKey name part>.
const LabelPrefix = "models.warmd.io/"

// Slug is the model's per-model compile-cache dir name ("Qwen/Qwen2.5-7B-Instruct" →
// "qwen--qwen2.5-7b-instruct"): the id lower-cased with "/" as "--". It validates the id first, so the
// result is one safe path component.
func Slug(name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return strings.ToLower(strings.Replace(name, "/", "--", 1)), nil
}

// NameFromSlug reverses Slug up to case: "qwen--qwen2.5-7b-instruct" gives "qwen/qwen2.5-7b-instruct".
// A slug Slug cannot have produced (upper case, an invalid id) is an error.
func NameFromSlug(slug string) (string, error) {
	name := strings.Replace(slug, "--", "/", 1)
	if s, err := Slug(name); err != nil || s != slug {
		return "", &NameError{Kind: "model slug", Value: slug, Rule: "is not the slug of a valid model name"}
	}
	return name, nil
}

// SameModel reports whether two ids name one model: equal up to case, as on the Hugging Face Hub
// (which resolves ids case-insensitively) and in the compile-cache slug. Invalid ids compare exactly.
func SameModel(a, b string) bool {
	if ValidateName(a) != nil || ValidateName(b) != nil {
		return a == b
	}
	return strings.EqualFold(a, b)
}

var (
	// hfSegment is one segment of a lossless model id: it starts and ends alphanumeric and has no "--",
	// so "org/name" → "org--name" can be split back at the only "--".
	hfSegment  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	notNameChr = regexp.MustCompile(`[^A-Za-z0-9._-]+`)
)

// labelNameMax is the longest name part of a qualified label key.
const labelNameMax = 63

// LabelKey maps one model id to its Node label key. Ids that are valid Hugging Face ids and short
// enough map readably and reversibly (NameFromLabelKey), the way the HF cache names dirs:
// "Qwen/Qwen2.5-7B-Instruct" → "models.warmd.io/Qwen--Qwen2.5-7B-Instruct". Anything else (odd
// characters, "--", too long) is sanitized and suffixed with a hash of the id, so two ids never share a
// key by accident. Use LabelKeys for a set of ids: it also resolves the (astronomically unlikely) hash
// collisions.
func LabelKey(name string) string { return LabelPrefix + labelKeyName(name, 8) }

func labelKeyName(name string, hashLen int) string {
	if lossless(name) {
		return strings.Replace(name, "/", "--", 1)
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:])[:hashLen]
	s := notNameChr.ReplaceAllString(strings.ReplaceAll(name, "/", "--"), "-")
	s = strings.Trim(s, "-_.")
	if max := labelNameMax - len(h) - 1; len(s) > max {
		s = strings.TrimRight(s[:max], "-_.")
	}
	if s == "" {
		return "model-" + h
	}
	return s + "-" + h
}

// lossless reports whether name's label key is its readable, reversible form.
func lossless(name string) bool {
	segs := strings.Split(name, "/")
	if len(segs) > 2 || len(name)+len(segs)-1 > labelNameMax {
		return false
	}
	for _, s := range segs {
		if !hfSegment.MatchString(s) || strings.Contains(s, "--") {
			return false
		}
	}
	return true
}

// NameFromLabelKey reverses LabelKey for the readable keys: "models.warmd.io/org--name" gives
// "org/name". ok is false for a key of another prefix and for a hashed key (a long or odd id), whose
// id only the config knows: compare LabelKey(id) with the key instead.
func NameFromLabelKey(key string) (name string, ok bool) {
	rest, ok := strings.CutPrefix(key, LabelPrefix)
	if !ok {
		return "", false
	}
	name = strings.Replace(rest, "--", "/", 1)
	if !lossless(name) || LabelKey(name) != key {
		return "", false
	}
	return name, true
}

// LabelKeys maps every id to a distinct valid label key. Ids whose keys collide get a longer hash until
// they do not; the mapping of an id does not depend on which other ids exist unless they collide.
func LabelKeys(names []string) map[string]string {
	out := make(map[string]string, len(names))
	byKey := map[string][]string{}
	for _, n := range names {
		k := LabelKey(n)
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
				k := LabelPrefix + labelKeyName(n, hl)
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
