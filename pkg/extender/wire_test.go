package extender

import (
	"encoding/json"
	"slices"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

func TestParseNames(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr bool
	}{
		{name: "compact", in: `["a","b.c","d-1"]`, want: []string{"a", "b.c", "d-1"}},
		{name: "empty", in: `[]`, want: []string{}},
		{name: "spaces fall back", in: `[ "a" , "b" ]`, want: []string{"a", "b"}},
		{name: "escapes fall back", in: `["a\u002eb"]`, want: []string{"a.b"}},
		{name: "one", in: `["only"]`, want: []string{"only"}},
		{name: "trailing comma is an error", in: `["a",]`, wantErr: true},
		{name: "not strings", in: `[1,2]`, wantErr: true},
		{name: "unterminated", in: `["a]`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNames([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
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
