package extender

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// FuzzDecodeArgs feeds the request decoder arbitrary bodies: it must never panic, and whatever it
// accepts encoding/json must accept too, with the same candidate names (the decoder is a streaming
// walk of the same grammar, never a looser one).
func FuzzDecodeArgs(f *testing.F) {
	seed, err := os.ReadFile("testdata/prioritize-nodenames.json")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{string(seed), `{}`, `{"NodeNames":null}`, `{"NodeNames":[]}`, `{"Nodes":{"items":[{"metadata":{"name":"a"}}]}}`,
		`{"Pod":{"metadata":{"annotations":{"warmd.io/model":"org/m"}}},"NodeNames":["a","b\u0041"]}`, `{"NodeNames":["a"],"NodeNames":["b"]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := decodeArgs(strings.NewReader(string(body)), DefaultMaxNodes)
		if err != nil {
			return
		}
		var std struct {
			Pod       *wirePod
			Nodes     *corev1.NodeList
			NodeNames *[]string
		}
		if err := json.Unmarshal(body, &std); err != nil {
			t.Fatalf("decodeArgs accepted %q, encoding/json refuses it: %v", body, err)
		}
		if (a.NodeNames == nil) != (std.NodeNames == nil) {
			t.Fatalf("NodeNames presence differs for %q", body)
		}
		if a.NodeNames != nil && strings.Join(*a.NodeNames, "\x00") != strings.Join(*std.NodeNames, "\x00") {
			t.Fatalf("NodeNames differ for %q: %q vs %q", body, *a.NodeNames, *std.NodeNames)
		}
		if (a.Nodes == nil) != (std.Nodes == nil) || a.Nodes != nil && len(a.Nodes.Items) != len(std.Nodes.Items) {
			t.Fatalf("Nodes differ for %q", body)
		}
	})
}
