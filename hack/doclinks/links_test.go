package doclinks

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// mdLink is a Markdown link's target: [text](target).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// repoPath is a path from the repository's root named in prose, a comment or a code span: it
	// starts with a top-level folder and ends in a file extension.
	repoPath = regexp.MustCompile(`(?:^|[\s(` + "`" + `'"])((?:docs|pkg|cmd|manifests|charts|scripts|hack|test|internal)/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.(?:md|go|yaml|yml|sh|txt|json|tpl))\b`)
)

// files returns the tracked files of the repository (relative to root) that end in one of exts.
func files(t *testing.T, root string, exts ...string) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var keep []string
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		for _, e := range exts {
			if strings.HasSuffix(f, e) {
				keep = append(keep, f)
			}
		}
	}
	return keep
}

func TestDocLinksResolve(t *testing.T) {
	root := "../.."
	exists := func(p string) bool { _, err := os.Stat(filepath.Join(root, p)); return err == nil }
	checked := 0
	for _, f := range files(t, root, ".md") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			checked++
			if p := filepath.Join(filepath.Dir(f), target); !exists(p) {
				t.Errorf("%s links %s, which does not exist (%s)", f, m[1], p)
			}
		}
	}
	for _, f := range files(t, root, ".md", ".yaml", ".yml", ".tpl") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range repoPath.FindAllStringSubmatch(string(b), -1) {
			if strings.ContainsAny(m[1], "*<>") {
				continue
			}
			checked++
			if !exists(m[1]) {
				t.Errorf("%s names %s, which is not in the repository", f, m[1])
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d links checked: the scan found (almost) nothing, so it checks nothing", checked)
	}
	t.Logf("%d links and paths checked", checked)
}
