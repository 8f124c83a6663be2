package readiness

import (
	"strings"
	"testing"
	"unicode"

	"warmd.io/warmd/pkg/nodelabels"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		vocab []phrase
		text  string
		want  string
	}{
		{weightsPhrases, `model org/m: model layout invalid: "model.safetensors": InvalidOffset: tensor #2's data_offsets overlap`, "the files are not a loadable model (InvalidOffset)"},
		{weightsPhrases, `model layout invalid: "a.safetensors": InvalidHeader: not UTF-8; "b.safetensors": InvalidHeaderStart: ...`, "the files are not a loadable model (InvalidHeaderStart, InvalidHeader)"},
		{weightsPhrases, "model layout invalid: config.json: is empty (vLLM reads...)", "the files are not a loadable model (config.json empty)"},
		{weightsPhrases, "model layout invalid: config.json is missing (vLLM needs it)", "the files are not a loadable model (config.json missing)"},
		{weightsPhrases, "verification failed: SHA256SUMS line 3: CANARY-SECRET-TOKEN", "verification failed: a file does not match its checksum"},
		{weightsPhrases, "write staging: disk full: 12 GiB needed", "disk full"},
		{weightsPhrases, `model m: sha256 manifest "SHA256SUMS" line 1 is not a "<64 hex digits>  <file>" line`, "the sha256 manifest is unreadable or not a sha256sum list"},
		{weightsPhrases, "list s3://b/p/: unsafe path \"../x\": climbs", "the source lists an unsafe file name"},
		{weightsPhrases, "operation error S3: ListObjectsV2, https response error StatusCode: 403, api error AccessDenied", "the store refused access"},
		{weightsPhrases, "dial tcp 10.0.0.1:443: connect: connection refused", "the store is unreachable"},
		{weightsPhrases, "CANARY-SECRET-TOKEN", "failed"},
		{imagePhrases, "pull reg/x:1: reg/x:1: not found", "the image is not in the registry"},
		{imagePhrases, "failed after 3 attempt(s): unexpected status 401 Unauthorized", "the registry refused access"},
		{imagePhrases, "mkdir /var/lib/warmd/images: permission denied", "permission denied on the node"},
		{cachePhrases, "restore: compile cache of another GPU SKU", "the shared cache is for another GPU SKU"},
		{cachePhrases, "bundle abc: unsafe bundle entry \"../../etc\"", "a bundle was refused as unsafe"},
		{cachePhrases, "bundle abc: entry x: sha256 mismatch", "a bundle is corrupt or failed its digest"},
	}
	for _, tc := range tests {
		if got := classify(tc.vocab, tc.text); got != tc.want {
			t.Errorf("classify(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}

// TestNothingFromAnErrorReachesTheNode: whatever a part's error says (a secret, control characters, a
// fake second line, megabytes), the condition and the status annotation carry only warmd's own words
// and the configured names.
func TestNothingFromAnErrorReachesTheNode(t *testing.T) {
	const secret = "CANARY-SECRET-TOKEN-do-not-leak"
	hostile := []string{
		"model layout invalid: " + secret,
		"verification failed: SHA256SUMS: \"" + secret + "\" is not <sha256>  <file>",
		secret + "\n\x1b[31mAllModelsWarm\u202e",
		strings.Repeat(secret, 100000),
		"unsafe path " + secret,
	}
	for _, h := range hostile {
		in := Input{SKU: "sku-1", CompileCacheEnabled: true, Models: []ModelInput{
			{Name: "org/a", Wants: true, Image: ImageFacts{Ref: "reg/a:1", Error: h}, Weights: WeightsFacts{Revision: "main", Error: h}, Cache: CacheFacts{Error: h}},
			{Name: "org/b", Wants: true, Weights: WeightsFacts{Revision: "main", Error: h}},
		}}
		d := Build(in, false, 0)
		for what, s := range map[string]string{
			"condition message": d.Condition.Message, "condition reason": d.Condition.Reason,
			"status annotation": d.Annotations[nodelabels.AnnotationStatus],
		} {
			if strings.Contains(s, "CANARY") {
				t.Errorf("%s quotes the error: %q", what, clip(s, 300))
			}
			for _, r := range s {
				if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
					t.Errorf("%s carries control character %U", what, r)
					break
				}
			}
		}
		if len(d.Condition.Message) > conditionMsgLimit || len(d.Annotations[nodelabels.AnnotationStatus]) > DefaultStatusCap {
			t.Errorf("caps exceeded: condition %d, annotation %d bytes", len(d.Condition.Message), len(d.Annotations[nodelabels.AnnotationStatus]))
		}
		if !strings.HasSuffix(d.Condition.Message, "("+statusHint+")") {
			t.Errorf("a failed condition does not say where the error is: %q", d.Condition.Message)
		}
		for _, m := range d.Models {
			if m.State != nodelabels.StateFailed || strings.Contains(m.Reason, "CANARY") {
				t.Errorf("model %s: %s %q", m.Name, m.State, clip(m.Reason, 200))
			}
		}
	}
}

func TestCleanText(t *testing.T) {
	if got := cleanText("a\nb\x1b[0m\u202ec\xff", 100); got != "a b[0mc" {
		t.Errorf("cleanText = %q", got)
	}
	if got := cleanText(strings.Repeat("é", 100), 11); got != "éééé..." {
		t.Errorf("cut = %q (%d bytes)", got, len(got))
	}
}
