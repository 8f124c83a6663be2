package main

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"strings"
)

// AllowList is the file of skips CI accepts (scripts/test-skips.txt): one line per skip,
// "<package> <test pattern> <reason>", the pattern a path.Match glob over the test's name (subtests
// as TestX/sub). '#' starts a comment line. A line without a reason is an error: the point of the
// list is that every skip says why it is fine.
type AllowList struct {
	file    string
	entries []allowEntry
}

type allowEntry struct {
	pkg, pattern, reason string
	line                 int
}

// LoadAllowList reads the allow-list at file.
func LoadAllowList(file string) (*AllowList, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("skip allow-list: %w", err)
	}
	return ParseAllowList(file, string(b))
}

// ParseAllowList parses an allow-list's text (file names it in errors and matches).
func ParseAllowList(file, text string) (*AllowList, error) {
	a := &AllowList{file: file}
	var problems []string
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 3 {
			problems = append(problems, fmt.Sprintf("%s:%d: want \"<package> <test pattern> <reason>\", got %q", file, n, l))
			continue
		}
		if _, err := path.Match(f[1], ""); err != nil {
			problems = append(problems, fmt.Sprintf("%s:%d: bad test pattern %q: %v", file, n, f[1], err))
			continue
		}
		a.entries = append(a.entries, allowEntry{pkg: f[0], pattern: f[1], reason: strings.Join(f[2:], " "), line: n})
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("skip allow-list: %s", strings.Join(problems, "; "))
	}
	return a, nil
}

// Match returns "file:line (reason)" of the first line that permits test in pkg to skip, or "".
// A nil list permits nothing.
func (a *AllowList) Match(pkg, test string) string {
	if a == nil {
		return ""
	}
	for _, e := range a.entries {
		if e.pkg != pkg && e.pkg != shortPkg(pkg) {
			continue
		}
		if ok, _ := path.Match(e.pattern, test); ok {
			return fmt.Sprintf("%s:%d (%s)", a.file, e.line, e.reason)
		}
	}
	return ""
}
