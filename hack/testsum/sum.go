package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, plus the build events of
// Go 1.24 on).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output, build-fail
}

// Skip is one test that skipped, with the reason its t.Skip gave (the last line it logged).
type Skip struct {
	Package, Test, Reason string
	// Allowed is the allow-list line that permits it, "" when none does.
	Allowed string
}

// Counts are what a run (or several) came to; the closing line prints them.
type Counts struct {
	Passed, Failed, Skipped int
	// Packages ran tests; NoTests had no test files; FailedPackages ended FAIL (a failed test, a
	// panic outside one, a build error or a timeout).
	Packages, NoTests, FailedPackages int
	Skips                             []Skip
	// FailedTests names each failed test as "package TestName".
	FailedTests []string
}

// Add merges o into c.
func (c *Counts) Add(o Counts) {
	c.Passed += o.Passed
	c.Failed += o.Failed
	c.Skipped += o.Skipped
	c.Packages += o.Packages
	c.NoTests += o.NoTests
	c.FailedPackages += o.FailedPackages
	c.Skips = append(c.Skips, o.Skips...)
	c.FailedTests = append(c.FailedTests, o.FailedTests...)
}

// Disallowed returns the skips no allow-list line permits.
func (c Counts) Disallowed() []Skip {
	var out []Skip
	for _, s := range c.Skips {
		if s.Allowed == "" {
			out = append(out, s)
		}
	}
	return out
}

// Line is the closing line: "N passed, N failed, N skipped (N allowed) in N packages (...)", the
// shape a CI log reader matches.
func (c Counts) Line() string {
	allowed := len(c.Skips) - len(c.Disallowed())
	return fmt.Sprintf("%d passed, %d failed, %d skipped (%d on the allow-list) in %d packages (%d failed, %d without tests)",
		c.Passed, c.Failed, c.Skipped, allowed, c.Packages, c.FailedPackages, c.NoTests)
}

// filter turns a `go test -json` stream into the output plain `go test` prints (a package's
// ok/FAIL line, a failed test's whole output, every build error) plus one "--- SKIP" line with its
// reason per skipped test, which plain `go test` hides. Verbose prints every line as `go test -v`
// would. Lines that are not JSON (what ran before go test) pass through as they are.
type filter struct {
	out     io.Writer
	verbose bool
	allow   *AllowList
	// buf holds each running test's output until it ends, keyed by package and test.
	buf    map[[2]string][]string
	counts Counts
}

func newFilter(out io.Writer, verbose bool, allow *AllowList) *filter {
	return &filter{out: out, verbose: verbose, allow: allow, buf: map[[2]string][]string{}}
}

// Run reads the stream to its end; raw, when not nil, receives every line unchanged.
func (f *filter) Run(in io.Reader, raw io.Writer) (Counts, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if raw != nil {
			raw.Write(line)
			raw.Write([]byte{'\n'})
		}
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintf(f.out, "%s\n", line)
			continue
		}
		f.handle(e)
	}
	if err := sc.Err(); err != nil {
		return f.counts, fmt.Errorf("read go test -json: %w", err)
	}
	return f.counts, nil
}

func (f *filter) handle(e event) {
	switch e.Action {
	case "build-output":
		io.WriteString(f.out, e.Output)
		return
	case "build-fail":
		return // the package's own "fail" event follows and counts it
	}
	key := [2]string{e.Package, e.Test}
	if e.Test == "" {
		f.handlePackage(e)
		return
	}
	switch e.Action {
	case "output":
		if f.verbose {
			io.WriteString(f.out, e.Output)
		} else if !strings.HasPrefix(e.Output, "=== ") { // -v's RUN/PAUSE/CONT lines
			f.buf[key] = append(f.buf[key], e.Output)
		}
	case "pass":
		f.counts.Passed++
		delete(f.buf, key)
	case "fail":
		f.counts.Failed++
		f.counts.FailedTests = append(f.counts.FailedTests, e.Package+" "+e.Test)
		f.flush(key)
	case "skip":
		f.counts.Skipped++
		s := Skip{Package: e.Package, Test: e.Test, Reason: skipReason(f.buf[key])}
		s.Allowed = f.allow.Match(s.Package, s.Test)
		f.counts.Skips = append(f.counts.Skips, s)
		if !f.verbose {
			fmt.Fprintf(f.out, "--- SKIP: %s %s: %s\n", shortPkg(e.Package), e.Test, s.Reason)
		}
		delete(f.buf, key)
	}
}

// handlePackage handles a package-level event: its own output (TestMain's, the ok/FAIL line) and
// its end.
func (f *filter) handlePackage(e event) {
	switch e.Action {
	case "output":
		if f.verbose || !packageNoise(e.Output) {
			io.WriteString(f.out, e.Output)
		}
	case "pass":
		f.counts.Packages++
	case "fail":
		f.counts.Packages++
		f.counts.FailedPackages++
		f.flushPackage(e.Package) // tests a panic or timeout cut short
	case "skip": // "? pkg [no test files]"
		f.counts.NoTests++
	}
}

// packageNoise is what plain `go test` does not print for a package (what -v adds around tests).
func packageNoise(s string) bool {
	return s == "PASS\n" || strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- PASS") || strings.HasPrefix(s, "--- SKIP")
}

func (f *filter) flush(key [2]string) {
	for _, l := range f.buf[key] {
		io.WriteString(f.out, l)
	}
	delete(f.buf, key)
}

// flushPackage prints what the package's unfinished tests wrote, so a panic or a timeout shows
// where each test was.
func (f *filter) flushPackage(pkg string) {
	var keys [][2]string
	for k := range f.buf {
		if k[0] == pkg {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][1] < keys[j][1] })
	for _, k := range keys {
		f.flush(k)
	}
}

// skipReason is the message of a test's t.Skip: the last line it logged before its "--- SKIP".
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "--- SKIP") || strings.HasPrefix(l, "=== ") {
			continue
		}
		return l
	}
	return "(no reason given)"
}

func shortPkg(p string) string { return strings.TrimPrefix(p, "warmd.io/warmd/") }
