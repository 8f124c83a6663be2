package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder captures Errorf instead of failing the real test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Errorf(format string, args ...any) { r.failed = format }
func (r *recorder) Helper()                           {}

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.golden")
	if err := os.WriteFile(path, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &recorder{TB: t}
	Check(r, path, []byte("a\nb\n"))
	if r.failed != "" {
		t.Errorf("equal output reported a difference")
	}
	Check(r, path, []byte("a\nc\n"))
	if r.failed == "" {
		t.Errorf("different output was accepted")
	}
	if d := diff("a\nb\n", "a\nc\n"); !strings.Contains(d, "-b\n+c") {
		t.Errorf("diff = %q", d)
	}
}
