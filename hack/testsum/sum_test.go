package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// realRun runs the real `go test -json` over a throwaway module whose tests pass, fail, skip (one
// allowed, one not), and a package with no tests, and returns the stream.
func realRun(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":        "module example.com/m\n\ngo 1.22\n",
		"a/a_test.go":   "package a\n\nimport \"testing\"\n\nfunc TestPass(t *testing.T) { t.Log(\"quiet unless it fails\") }\n\nfunc TestFail(t *testing.T) { t.Error(\"the reason it failed\") }\n\nfunc TestSub(t *testing.T) {\n\tt.Run(\"one\", func(t *testing.T) {})\n\tt.Run(\"gpu\", func(t *testing.T) { t.Skip(\"needs a GPU\") })\n}\n",
		"b/b_test.go":   "package b\n\nimport \"testing\"\n\nfunc TestHides(t *testing.T) { t.Skip(\"service is not running\") }\n",
		"c/c.go":        "package c\n",
		"d/d_test.go":   "package d\n\nimport \"testing\"\n\nfunc TestOK(t *testing.T) {}\n",
		"e/e_test.go":   "package e\n\nfunc broken( {\n",
		"a/doc_test.go": "package a\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err == nil {
		t.Fatalf("go test passed over failing tests:\n%s", out)
	}
	return out
}

const allowText = `# test allow-list
example.com/m/a TestSub/gpu needs a GPU, and CI has none
`

func TestFilterOverARealRun(t *testing.T) {
	stream := realRun(t)
	allow, err := ParseAllowList("skips.txt", allowText)
	if err != nil {
		t.Fatal(err)
	}
	var out, raw bytes.Buffer
	c, err := newFilter(&out, false, allow).Run(bytes.NewReader(stream), &raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw.Bytes(), stream) {
		t.Error("the raw copy differs from the stream")
	}
	// TestPass, TestSub, TestSub/one, d.TestOK pass; TestFail fails; TestSub/gpu, TestHides skip.
	if c.Passed != 4 || c.Failed != 1 || c.Skipped != 2 || c.Packages != 4 || c.FailedPackages != 2 || c.NoTests != 1 {
		t.Errorf("counts %+v; want 4 passed, 1 failed, 2 skipped, 4 packages (2 failed: a and the broken e), 1 without tests", c)
	}
	got := out.String()
	for _, want := range []string{
		"the reason it failed",                    // a failed test's output
		"--- FAIL: TestFail",                      // and its verdict line
		"--- SKIP: example.com/m/a TestSub/gpu: ", // every skip, with its reason
		"needs a GPU",                             //
		"--- SKIP: example.com/m/b TestHides: ",   //
		"ok  \texample.com/m/d",                   // go test's own package lines
		"FAIL\texample.com/m/a",                   //
		"e_test.go:3",                             // the build error
		"?   \texample.com/m/c\t[no test files]",  // plain go test prints it too
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet unless it fails") || strings.Contains(got, "=== RUN") {
		t.Errorf("output holds what plain go test hides:\n%s", got)
	}
	if d := c.Disallowed(); len(d) != 1 || d[0].Test != "TestHides" || d[0].Reason != "b_test.go:5: service is not running" {
		t.Errorf("disallowed skips %+v, want only b.TestHides with its message", d)
	}

	// The report over the saved stream: in CI the skip off the list fails and is counted as failed.
	file := filepath.Join(t.TempDir(), "run.json")
	if err := os.WriteFile(file, stream, 0o644); err != nil {
		t.Fatal(err)
	}
	allowFile := filepath.Join(t.TempDir(), "skips.txt")
	if err := os.WriteFile(allowFile, []byte(allowText), 0o644); err != nil {
		t.Fatal(err)
	}
	var rep bytes.Buffer
	if code := run([]string{"-report", "-allow", allowFile, file}, nil, &rep, &rep, true); code != 1 {
		t.Errorf("report exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(rep.String()), "\n")
	last := lines[len(lines)-1]
	if want := "4 passed, 2 failed, 2 skipped (1 on the allow-list) in 4 packages (2 failed, 1 without tests)"; last != want {
		t.Errorf("closing line %q, want %q\n%s", last, want, rep.String())
	}
	if !strings.Contains(rep.String(), "example.com/m/b TestHides: b_test.go:5: service is not running") || !strings.Contains(rep.String(), "skips.txt:2 (needs a GPU, and CI has none)") {
		t.Errorf("report does not name each skip and what allows it:\n%s", rep.String())
	}
}

// Outside CI a skip is only reported; a run whose tests all pass exits 0.
func TestSkipOutsideCIPasses(t *testing.T) {
	stream := `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: containerd is not running: run make testenv\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- SKIP: TestA (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestA","Elapsed":0}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.01s\n"}
{"Action":"pass","Package":"p","Elapsed":0.01}
`
	for _, ci := range []bool{false, true} {
		var out bytes.Buffer
		code := run([]string{"-allow", "/dev/null"}, strings.NewReader(stream), &out, &out, ci)
		if want := map[bool]int{false: 0, true: 1}[ci]; code != want {
			t.Errorf("CI=%v: exit %d, want %d\n%s", ci, code, want, out.String())
		}
		if !strings.Contains(out.String(), "--- SKIP: p TestA: a_test.go:9: containerd is not running") {
			t.Errorf("CI=%v: the skip's reason is not printed:\n%s", ci, out.String())
		}
	}
}

func TestAllowListNeedsAReason(t *testing.T) {
	if _, err := ParseAllowList("f", "pkg TestX\n"); err == nil || !strings.Contains(err.Error(), "f:1") {
		t.Errorf("a line without a reason: err %v, want one naming f:1", err)
	}
	if _, err := ParseAllowList("f", "pkg Test[ bad pattern\n"); err == nil {
		t.Error("a bad glob was accepted")
	}
}

// The repository's own allow-list parses, and every line says why.
func TestRepositoryAllowList(t *testing.T) {
	if _, err := LoadAllowList("../../scripts/test-skips.txt"); err != nil {
		t.Fatal(err)
	}
}
