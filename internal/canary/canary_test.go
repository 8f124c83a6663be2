package canary

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiffSeesEveryKindOfChange proves the check can fail: each kind of change a hostile case could
// make outside the data dir shows up as a difference.
func TestDiffSeesEveryKindOfChange(t *testing.T) {
	cases := []struct {
		name   string
		change func(root string) error
		want   string
	}{
		{"content", func(r string) error { return os.WriteFile(filepath.Join(r, "secret.txt"), []byte("x"), 0o644) }, "secret.txt: was"},
		{"mode", func(r string) error { return os.Chmod(filepath.Join(r, "etc/passwd"), 0o600) }, "etc/passwd: was"},
		{"added", func(r string) error { return os.WriteFile(filepath.Join(r, "nested/new"), nil, 0o644) }, "nested/new: added"},
		{"removed", func(r string) error { return os.RemoveAll(filepath.Join(r, "empty")) }, "empty: removed"},
		{"link retargeted", func(r string) error {
			p := filepath.Join(r, "link-rel")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink("etc/passwd", p)
		}, "link-rel: was"},
		{"file became link", func(r string) error {
			p := filepath.Join(r, "weights/model.bin")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink("/", p)
		}, "weights/model.bin: was"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := New(t)
			if diff := Diff(d.want, Take(t, d.Path)); len(diff) != 0 {
				t.Fatalf("fresh canary differs from itself: %v", diff)
			}
			if err := tc.change(d.Path); err != nil {
				t.Fatal(err)
			}
			diff := strings.Join(Diff(d.want, Take(t, d.Path)), "\n")
			if !strings.Contains(diff, tc.want) {
				t.Errorf("diff after %s = %q, want it to name %q", tc.name, diff, tc.want)
			}
		})
	}
}
