package phases

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes as a log: the parser must never panic, and whatever it returns must
// render in every format.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.log"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		// Seed with the head of each fixture: whole files make each exec slow.
		f.Add(string(b[:min(len(b), 4096)]))
	}
	f.Add("2026-01-01T00:00:00Z stdout P \x1b[1;36m(Worker_TP1 pid=1)\x1b[0;0m INFO 12-31 23:59:59 [x.py:1] Graph capturing finished in 9 secs")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(strings.NewReader(s), Options{Source: "fuzz", Reference: ref})
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		if err := WriteJSON(&sb, []Result{r}); err != nil {
			t.Fatal(err)
		}
		if err := WriteTable(&sb, []Result{r}); err != nil {
			t.Fatal(err)
		}
		if err := WriteSVG(&sb, []Result{r}); err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Phases {
			if p.Seconds < 0 {
				t.Fatalf("negative phase %s: %v", p.Name, p.Seconds)
			}
		}
	})
}
