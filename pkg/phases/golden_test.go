package phases

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	goldenfile "warmd.io/warmd/internal/golden"
)

// golden compares got with testdata/golden/name (internal/golden; -update rewrites it).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", "golden", name), got)
}

func TestGoldenJSON(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.log"))
	if err != nil || len(files) < 10 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteJSON(&buf, []Result{parseFile(t, name)}); err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(buf.Bytes(), []byte("{")) {
				t.Fatalf("one input must give one object, got %.20q", buf.String())
			}
			golden(t, strings.TrimSuffix(name, ".log")+".json", buf.Bytes())
		})
	}
}

func TestGoldenRenderers(t *testing.T) {
	rs := []Result{parseFile(t, "seed-7b-cold.log"), parseFile(t, "seed-7b-warm.log")}
	tests := []struct {
		name  string
		write func(*bytes.Buffer) error
	}{
		{"seed-table.txt", func(b *bytes.Buffer) error { return WriteTable(b, rs) }},
		{"seed-cold-table.txt", func(b *bytes.Buffer) error { return WriteTable(b, rs[:1]) }},
		{"seed.json", func(b *bytes.Buffer) error { return WriteJSON(b, rs) }},
		{"seed.svg", func(b *bytes.Buffer) error { return WriteSVG(b, rs) }},
		{"failures-table.txt", func(b *bytes.Buffer) error {
			return WriteTable(b, []Result{parseFile(t, "crash-before-compile.log"), parseFile(t, "oom-kv-sizing.log")})
		}},
		{"failures.svg", func(b *bytes.Buffer) error {
			return WriteSVG(b, []Result{parseFile(t, "crash-before-compile.log"), parseFile(t, "oom-kv-sizing.log")})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tc.write(&buf); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, buf.Bytes())
		})
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rs); err != nil || !bytes.HasPrefix(buf.Bytes(), []byte("[")) {
		t.Errorf("several inputs must give an array: %v %.20q", err, buf.String())
	}
}

// Records are kept on disk as JSON: a round trip must keep every field the contract has.
func TestJSONRoundTrip(t *testing.T) {
	r := parseFile(t, "v0.10.1-v1-download.log")
	b1, err := r.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := back.UnmarshalJSON(b1); err != nil {
		t.Fatal(err)
	}
	b2, _ := back.MarshalJSON()
	if !bytes.Equal(b1, b2) {
		t.Errorf("round trip changed the JSON:\n%s\n%s", b1, b2)
	}
}
