package extender

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// TestDecodeNames: NodeNames is read one name at a time, with the JSON grammar encoding/json has.
func TestDecodeNames(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr bool
	}{
		{name: "compact", in: `["a","b.c","d-1"]`, want: []string{"a", "b.c", "d-1"}},
		{name: "empty", in: `[]`, want: []string{}},
		{name: "spaces", in: `[ "a" , "b" ]`, want: []string{"a", "b"}},
		{name: "escapes", in: `["a\u002eb"]`, want: []string{"a.b"}},
		{name: "one", in: `["only"]`, want: []string{"only"}},
		{name: "trailing comma is an error", in: `["a",]`, wantErr: true},
		{name: "not strings", in: `[1,2]`, wantErr: true},
		{name: "unterminated", in: `["a]`, wantErr: true},
		{name: "missing comma", in: `["a" "b"]`, wantErr: true},
		{name: "an object", in: `{"a":1}`, wantErr: true},
		{name: "nested", in: `[["a"]]`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := decodeArgs(strings.NewReader(`{"NodeNames":`+tt.in+`}`), DefaultMaxNodes)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && (a.NodeNames == nil || !slices.Equal(*a.NodeNames, tt.want)) {
				t.Errorf("got %v, want %q", a.NodeNames, tt.want)
			}
		})
	}
}

// The hand-written HostPriorityList must be byte-for-byte what encoding/json writes.
func TestAppendPrioritiesMatchesEncodingJSON(t *testing.T) {
	l := extenderv1.HostPriorityList{{Host: "a", Score: 10}, {Host: "b.c-1", Score: 0}, {Host: `odd"<name>`, Score: 5}}
	want, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if got := appendPriorities(nil, l); string(got) != string(want)+"\n" {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := appendPriorities(nil, extenderv1.HostPriorityList{}); string(got) != "[]\n" {
		t.Errorf("empty list = %q", got)
	}
}
