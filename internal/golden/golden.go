// Package golden compares test output with files under testdata and rewrites them with -update, so
// every package's golden tests (CLI output, rendered manifests, phase reports) work the same way:
// `go test ./PKG -run TEST -update` after an intended change, then review the diff in git.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// update is registered once here for every test binary that imports the package.
var update = flag.Bool("update", false, "rewrite golden files under testdata with the current output")

// Check compares got with the file at path (relative to the test's package dir), or writes it there
// when -update is set. A mismatch shows the first differing lines.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run with -update if the change is intended):\n%s", path, diff(string(want), string(got)))
	}
}

// diff lists differing lines, "-" from the golden file and "+" from the output, up to 40 lines.
func diff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			out = append(out, "-"+x, "+"+y)
		}
		if len(out) >= 40 {
			break
		}
	}
	return strings.Join(out, "\n")
}
