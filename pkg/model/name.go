// Package model is model identity: the one validator for the names warmd turns into paths (model ids,
// revisions and compile-cache component names), and every other name a model goes by, each with its
// reverse: the Hugging Face cache directory name (models--org--name, DirName), the per-model
// compile-cache dir (Slug) and the Node label key (LabelKey). A name that passes here is safe as the
// path component(s) warmd makes of it; config validation, the weights engine, the compile-cache code,
// readiness and the extender all call it, so no second, looser rule or spelling exists anywhere.
//
// The model id rules are the Hugging Face Hub's (huggingface_hub validate_repo_id): "name" or
// "namespace/name", each part 1..96 characters of [A-Za-z0-9._-], not starting or ending with '-' or
// '.', no "--" or ".." anywhere (so the cache dir name is reversible and no part is "." or ".."), and
// not ending in ".git". It does not own what is stored under those names.
package model

import (
	"errors"
	"fmt"
	"strings"

	"warmd.io/warmd/pkg/fsroot"
)

// Bounds of the names, exported so docs and error messages quote one number.
const (
	// MaxPartLen is the Hub's limit for a namespace or a repo name.
	MaxPartLen = 96
	// MaxRevisionLen bounds a revision: a 40- or 64-hex commit id, or a branch/tag name. 128 leaves
	// room under NAME_MAX (255) for the suffixes of staging dirs built from it.
	MaxRevisionLen = 128
	// dirPrefix starts every model dir of the HF hub cache layout.
	dirPrefix = "models--"
)

// ErrInvalid is what errors.Is matches for every name this package refuses.
var ErrInvalid = errors.New("invalid name")

// NameError says which name was refused and which rule it breaks. The value is a config value or a
// name from outside, never file content; it is quoted and shortened (fsroot.Quote) so it prints safely.
type NameError struct {
	// Kind is "model name", "revision" or "compile-cache component".
	Kind  string
	Value string
	// Rule is the broken rule, phrased as the fix.
	Rule string
}

func (e *NameError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.Kind, fsroot.Quote(e.Value), e.Rule)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *NameError) Is(target error) bool { return target == ErrInvalid }

// ValidateName checks a model id ("Qwen/Qwen2.5-7B-Instruct" or "gpt2") against the Hub's rules.
func ValidateName(s string) error {
	bad := func(rule string) error { return &NameError{Kind: "model name", Value: s, Rule: rule} }
	if s == "" {
		return bad("is empty; use the Hugging Face id, e.g. Qwen/Qwen2.5-7B-Instruct")
	}
	parts := strings.Split(s, "/")
	if len(parts) > 2 {
		return bad(`has more than one "/"; use "name" or "namespace/name" as on the Hugging Face Hub`)
	}
	for i, p := range parts {
		what := "the name"
		if len(parts) == 2 && i == 0 {
			what = "the namespace"
		}
		if err := checkPart(p); err != "" {
			return bad(what + " " + err)
		}
	}
	if strings.HasSuffix(s, ".git") {
		return bad(`ends in ".git"; the Hub refuses such ids`)
	}
	return nil
}

// checkPart applies the Hub's rules to one part of an id; it returns the broken rule or "".
func checkPart(p string) string {
	switch {
	case p == "":
		return `is empty; use "name" or "namespace/name"`
	case len(p) > MaxPartLen:
		return fmt.Sprintf("is %d characters; the Hub allows at most %d", len(p), MaxPartLen)
	}
	for i := 0; i < len(p); i++ {
		if !idChar(p[i]) {
			return fmt.Sprintf("has %q at byte %d; use only letters, digits, '-', '_' and '.'", p[i:i+1], i)
		}
	}
	switch {
	case p[0] == '-' || p[0] == '.' || p[len(p)-1] == '-' || p[len(p)-1] == '.':
		return "starts or ends with '-' or '.'; the Hub refuses that"
	case strings.Contains(p, "--"):
		return `contains "--", which the Hub refuses (it separates the parts of the cache dir name)`
	case strings.Contains(p, ".."):
		return `contains ".."; the Hub refuses that`
	}
	return ""
}

func idChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// ValidateRevision checks a revision: a commit id or a branch or tag name that is also safe as one
// path component (the snapshot dir). Git's ref-name rules apply (no "..", no "@{", no leading '-' or
// '.', no trailing '.' or ".lock"), restricted to [A-Za-z0-9._+-] and at most MaxRevisionLen bytes.
// A "/" is refused: revisions such as "refs/pr/1" would need nested snapshot dirs; pin the commit id.
func ValidateRevision(s string) error {
	bad := func(rule string) error { return &NameError{Kind: "revision", Value: s, Rule: rule} }
	switch {
	case s == "":
		return bad("is empty; use a commit id or a branch/tag such as main")
	case len(s) > MaxRevisionLen:
		return bad(fmt.Sprintf("is %d bytes; at most %d", len(s), MaxRevisionLen))
	case strings.Contains(s, "/"):
		return bad(`contains "/"; it names one snapshot dir: use the commit id, or a branch/tag without "/"`)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !idChar(c) && c != '+' {
			return bad(fmt.Sprintf("has %q at byte %d; use only letters, digits and '-', '_', '.', '+'", s[i:i+1], i))
		}
	}
	switch {
	case s[0] == '-' || s[0] == '.':
		return bad("starts with '-' or '.'; git refuses such ref names")
	case strings.HasSuffix(s, ".") || strings.HasSuffix(s, ".lock"):
		return bad(`ends in "." or ".lock"; git refuses such ref names`)
	case strings.Contains(s, ".."):
		return bad(`contains ".."; git refuses that in ref names`)
	}
	return nil
}

// The compile-cache components: the four caches a vLLM pod writes, each its own subtree under
// compile-cache/<sku>/ and its own bundle stream. pkg/cache names them; this is the list that any name
// read from a bundle, an index or a pod-written tree must be one of.
const (
	ComponentVLLM       = "vllm"
	ComponentInductor   = "inductor"
	ComponentTriton     = "triton"
	ComponentFlashInfer = "flashinfer"
)

// Components lists every component in a stable order.
var Components = []string{ComponentVLLM, ComponentInductor, ComponentTriton, ComponentFlashInfer}

// ValidateComponent checks that s is one of Components.
func ValidateComponent(s string) error {
	for _, c := range Components {
		if s == c {
			return nil
		}
	}
	return &NameError{Kind: "compile-cache component", Value: s, Rule: "is not one of " + strings.Join(Components, ", ")}
}

// DirName is the model's dir in the Hugging Face hub cache layout: "models--org--name" (or
// "models--name"). It validates the name first, so the result is always one safe path component.
func DirName(name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return dirPrefix + strings.ReplaceAll(name, "/", "--"), nil
}

// NameFromDir reverses DirName: "models--org--name" gives "org/name". A dir that DirName cannot have
// produced (another prefix, three parts, an invalid name) is an error, so a dir planted in the cache
// is never taken for a model.
func NameFromDir(dir string) (string, error) {
	rest, ok := strings.CutPrefix(dir, dirPrefix)
	if !ok {
		return "", &NameError{Kind: "model dir", Value: dir, Rule: `does not start with "models--"`}
	}
	name := strings.Replace(rest, "--", "/", 1)
	if d, err := DirName(name); err != nil || d != dir {
		return "", &NameError{Kind: "model dir", Value: dir, Rule: "does not hold a valid model name"}
	}
	return name, nil
}
