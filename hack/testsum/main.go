// Command testsum is how `make test` (scripts/test.sh) reads `go test -json`: it prints what plain
// `go test` prints (each package's ok/FAIL line, a failed test's output, build errors) plus a
// "--- SKIP" line with its reason for every skipped test, which plain `go test` hides, and ends with
// one closing line: "N passed, N failed, N skipped (...) in N packages (...)". With CI set (.ci/run
// sets it), a skip that no line of the allow-list (scripts/test-skips.txt) permits counts as a
// failure: in CI every service is up, so a skip there is a broken setup or a test that hides.
//
//	go test -json ./... | testsum [-v] [-allow FILE] [-raw FILE]   filter one run (-raw keeps its JSON)
//	testsum -report [-allow FILE] FILE...                          the closing summary of saved runs
//
// Its exit status is 1 when a test or package failed (or, in CI, a skip is not allowed), else 0.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv("CI") != ""))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer, ci bool) int {
	fs := flag.NewFlagSet("testsum", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "print every test's output as it comes, as go test -v does")
	allowFile := fs.String("allow", "scripts/test-skips.txt", "the allow-list of skips CI accepts")
	rawFile := fs.String("raw", "", "append the JSON stream to this file (for -report)")
	report := fs.Bool("report", false, "summarise the saved JSON files named as arguments")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	allow, err := LoadAllowList(*allowFile)
	if err != nil {
		fmt.Fprintln(stderr, "testsum:", err)
		return 2
	}
	if *report {
		var total Counts
		for _, name := range fs.Args() {
			c, err := summarise(name, allow)
			if err != nil {
				fmt.Fprintln(stderr, "testsum:", err)
				return 2
			}
			total.Add(c)
		}
		return finish(stdout, total, ci, true)
	}
	var raw io.Writer
	if *rawFile != "" {
		f, err := os.OpenFile(*rawFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(stderr, "testsum:", err)
			return 2
		}
		defer f.Close()
		raw = f
	}
	c, err := newFilter(stdout, *verbose, allow).Run(stdin, raw)
	if err != nil {
		fmt.Fprintln(stderr, "testsum:", err)
		return 2
	}
	return finish(stdout, c, ci, false)
}

func summarise(name string, allow *AllowList) (Counts, error) {
	f, err := os.Open(name)
	if err != nil {
		return Counts{}, fmt.Errorf("saved run: %w", err)
	}
	defer f.Close()
	return newFilter(io.Discard, false, allow).Run(f, nil)
}

// finish prints the skips (with what allows each), the failures and the closing line, and returns
// the exit status. listSkips is for the final report; a single run printed each skip as it came.
func finish(w io.Writer, c Counts, ci, listSkips bool) int {
	if listSkips && len(c.Skips) > 0 {
		fmt.Fprintf(w, "skipped tests (%d):\n", len(c.Skips))
		for _, s := range c.Skips {
			by := s.Allowed
			if by == "" {
				by = "NOT on the allow-list"
			}
			fmt.Fprintf(w, "  %s %s: %s [%s]\n", shortPkg(s.Package), s.Test, s.Reason, by)
		}
	}
	bad := c.Disallowed()
	if ci && len(bad) > 0 {
		fmt.Fprintf(w, "FAIL: %d skips in CI are not on the allow-list (in CI every service is up; fix the setup, or add the test with its reason to scripts/test-skips.txt):\n", len(bad))
		for _, s := range bad {
			fmt.Fprintf(w, "  %s %s: %s\n", shortPkg(s.Package), s.Test, s.Reason)
		}
		c.Failed += len(bad)
	}
	if len(c.FailedTests) > 0 {
		fmt.Fprintf(w, "failed tests: %s\n", strings.Join(c.FailedTests, ", "))
	}
	fmt.Fprintln(w, c.Line())
	if c.Failed > 0 || c.FailedPackages > 0 {
		return 1
	}
	return 0
}
