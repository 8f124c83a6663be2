package readiness

import (
	"slices"
	"strings"
	"unicode/utf8"

	"warmd.io/warmd/pkg/state"
)

// What warmd writes on the Node about a failure is built from its own vocabulary, never from the
// failing part's error text. Anyone who can read Nodes reads the WarmdReady condition and the
// warmd.io/status annotation, while an error's text may hold names from a bucket, a registry or a
// pod-written tree (and, through a bug in a part, file content: a checksum manifest that is a symlink
// to a secret). So a part's error is classified into one of the phrases below by the sentinel
// phrases warmd's own errors carry; the text itself stays in the part's own status section on the
// node's root-only socket (`warmd status`) and in the daemon's log.

// phrase is one entry of the vocabulary: a node-safe description and the phrases of warmd's own
// errors (lower case) that select it. The first match wins.
type phrase struct {
	say   string
	match []string
}

var (
	weightsPhrases = []phrase{
		{"the files are not a loadable model", []string{"model layout invalid"}},
		{"permission denied on the node", []string{"permission denied", "operation not permitted", "read-only file system"}},
		{"verification failed: a file does not match its checksum", []string{"verification failed"}},
		{"disk full", []string{"disk full", "no space left"}},
		{"over the weights budget", []string{"weights budget exceeded"}},
		{"the sha256 manifest is unreadable or not a sha256sum list", []string{"sha256 manifest"}},
		{"the source lists an unsafe file name", []string{"unsafe path"}},
		{"a symlink is in the way under the data dir", []string{"a symlink is in the way"}},
		{"no files match the source and globs", []string{"no files under", "no files match"}},
		{"the store refused access", []string{"accessdenied", "access denied", "invalidaccesskeyid", "signaturedoesnotmatch", "forbidden", "statuscode: 403"}},
		{"the bucket does not exist", []string{"nosuchbucket"}},
		{"an object vanished from the store", []string{"nosuchkey", "object not found"}},
		{"the store is unreachable", []string{"connection refused", "no such host", "i/o timeout", "deadline exceeded", "connection reset"}},
	}
	imagePhrases = []phrase{
		{"disk full", []string{"disk full", "no space left"}},
		{"permission denied on the node", []string{"permission denied", "operation not permitted", "read-only file system"}},
		{"the registry refused access", []string{"unauthorized", "denied", "forbidden", "401", "403"}},
		{"the image is not in the registry", []string{"not found", "manifest unknown", "name unknown", "404"}},
		{"the image has no build for this platform", []string{"no match for platform"}},
		{"the registry is unreachable", []string{"connection refused", "no such host", "i/o timeout", "deadline exceeded", "connection reset", "tls:", "x509:"}},
		{"the image is not a valid reference", []string{"invalid reference"}},
	}
	cachePhrases = []phrase{
		{"the shared cache is for another GPU SKU", []string{"compile cache of another gpu sku"}},
		{"not enough free disk space", []string{"not enough free disk space", "disk full", "no space left"}},
		{"permission denied on the node", []string{"permission denied", "operation not permitted", "read-only file system"}},
		{"a bundle was refused as unsafe", []string{"unsafe bundle entry", "unsafe path", "a symlink is in the way", "crosses into another mount"}},
		{"a bundle is corrupt or failed its digest", []string{"corrupt bundle", "digest", "sha256"}},
		{"a bundle exceeds its size limit", []string{"bundle exceeds size limit"}},
		{"the store refused access", []string{"accessdenied", "access denied", "invalidaccesskeyid", "signaturedoesnotmatch", "forbidden"}},
		{"the store is unreachable", []string{"connection refused", "no such host", "i/o timeout", "deadline exceeded", "connection reset"}},
	}
	// safetensorsRules are the reference loader's rule names pkg/prefetch/weights reports; one found in
	// a layout error is ours to repeat (it tells the operator which rule the file broke).
	safetensorsRules = []string{"HeaderTooSmall", "HeaderTooLarge", "InvalidHeaderLength", "InvalidHeaderStart",
		"InvalidHeaderDeserialization", "InvalidHeader", "InvalidOffset", "TensorInvalidInfo", "MetadataIncompleteBuffer",
		"ValidationOverflow", "MisalignedSlice"}
)

// statusHint ends every failure on the Node: where the whole story is.
const statusHint = "see `warmd status` on the node"

// classify returns the node-safe phrase for a part's error text: the first vocabulary entry whose
// phrase the text carries, else "failed". For a weights layout error it adds the safetensors rules
// and the config.json problem the text names. The result never contains text from the error.
func classify(vocabulary []phrase, text string) string {
	lower := strings.ToLower(text)
	for _, p := range vocabulary {
		for _, m := range p.match {
			if strings.Contains(lower, m) {
				if p.say == weightsPhrases[0].say {
					return p.say + layoutDetail(text)
				}
				return p.say
			}
		}
	}
	return "failed"
}

// layoutDetail names, from the fixed lists, what a layout error says is wrong.
func layoutDetail(text string) string {
	var found []string
	for _, r := range safetensorsRules {
		// InvalidHeader is a prefix of other rule names: count it only as a word of its own.
		if containsWord(text, r) {
			found = append(found, r)
		}
	}
	for _, c := range []struct{ match, say string }{
		{"config.json is missing", "config.json missing"},
		{"config.json: is empty", "config.json empty"},
		{"config.json: is not a JSON object", "config.json not a JSON object"},
		{"weight_map is missing", "a shard missing"},
		{"are missing from", "a shard missing"},
	} {
		if strings.Contains(text, c.match) && !slices.Contains(found, c.say) {
			found = append(found, c.say)
		}
	}
	if len(found) == 0 {
		return ""
	}
	return " (" + strings.Join(found, ", ") + ")"
}

func containsWord(text, w string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], w)
		if j < 0 {
			return false
		}
		end := i + j + len(w)
		if end == len(text) || !isIdentRune(text[end]) {
			return true
		}
		i = end
	}
}

func isIdentRune(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// cleanText makes our own text safe for a Node field: state.CleanText's cleaning (control, format
// and invalid bytes dropped), newlines and tabs turned into spaces (a field is one line), cut at n
// bytes on a rune boundary. Everything warmd writes on the Node passes through it last, as a backstop
// for names that came from outside (model and image names are validated by pkg/config, but a Node
// field must not depend on that alone).
func cleanText(s string, n int) string {
	s = strings.NewReplacer("\n", " ", "\t", " ").Replace(state.CleanText(s))
	return clip(s, n)
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut with "...".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-3, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
