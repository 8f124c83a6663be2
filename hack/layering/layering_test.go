package main

import (
	"strings"
	"testing"
)

// TestRepository is the check `make lint` runs, run by `make test` too: the rules hold (but for the
// allow-list) and docs/architecture.md's graph is the code's.
func TestRepository(t *testing.T) {
	problems, warnings, err := Verify("../..", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warnings {
		t.Log(w)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func pkg(path string, lines, funcs int, imports ...string) *Package {
	return &Package{Path: path, Imports: imports, Deps: imports, Lines: lines, Funcs: funcs}
}

// tangled is a module that breaks every rule once.
func tangled() map[string]*Package {
	ps := []*Package{
		pkg("pkg/daemon", 10, 1),
		pkg("pkg/cache", 10, 1, "pkg/daemon", "pkg/peer"),
		pkg("pkg/peer", 10, 1),
		pkg("pkg/peer/serve", 10, 1, "pkg/cache", "pkg/peer"),
		pkg("pkg/extender", 10, 1, "pkg/cache"),
		pkg("pkg/state", 10, 1, "internal/testenv"),
		pkg("pkg/state/statetest", 10, 1, "internal/testenv"),
		pkg("internal/testenv", 10, 1),
		pkg("cmd/warmd", 200, 9, "pkg/cli", "pkg/cache"),
		pkg("pkg/cli", 10, 1),
	}
	// Deps are transitive.
	ps[4].Deps = []string{"pkg/cache", "pkg/daemon", "pkg/peer"}
	out := map[string]*Package{}
	for _, p := range ps {
		out[p.Path] = p
	}
	return out
}

func TestEachRuleFails(t *testing.T) {
	a, err := ParseAllow("allow.txt", "")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(Check(tangled(), a), "\n")
	for _, want := range []string{
		"pkg/extender links pkg/cache (the daemon or one of its parts)",
		"pkg/extender links pkg/daemon",
		"pkg/state links the test helper internal/testenv",
		"cmd/warmd holds 200 lines and 9 funcs",
		"cmd/warmd imports pkg/cache",
		"folder-level import cycle among pkg/cache, pkg/peer: pkg/cache -> pkg/peer (pkg/cache -> pkg/peer); pkg/peer -> pkg/cache (pkg/peer/serve -> pkg/cache)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("violations lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "statetest") || strings.Contains(got, "pkg/peer/serve links") {
		t.Errorf("a test helper or a package the rules do not cover was reported:\n%s", got)
	}
}

func TestClientsetRule(t *testing.T) {
	m := map[string]*Package{
		"pkg/peer":         {Path: "pkg/peer", Foreign: []string{"k8s.io/client-go/kubernetes/typed/core/v1", "k8s.io/client-go/listers/core/v1", "k8s.io/client-go/rest"}},
		"pkg/extender":     {Path: "pkg/extender", Foreign: []string{"k8s.io/client-go/tools/leaderelection/resourcelock", "k8s.io/client-go/tools/cache"}},
		"pkg/readiness":    {Path: "pkg/readiness", Foreign: []string{"k8s.io/client-go/tools/record", "k8s.io/client-go/tools/reference"}},
		"internal/testenv": {Path: "internal/testenv", Foreign: []string{"k8s.io/client-go/informers"}},
	}
	a, err := ParseAllow("allow.txt", "")
	if err != nil {
		t.Fatal(err)
	}
	got := Check(m, a)
	want := []string{"pkg/extender links k8s.io/client-go/tools/leaderelection/resourcelock: use pkg/kube", "pkg/peer links k8s.io/client-go/kubernetes/typed/core/v1: use pkg/kube",
		"pkg/readiness links k8s.io/client-go/tools/record: use pkg/kube"}
	if len(got) != len(want) {
		t.Fatalf("violations %q, want the three of %q (the core/v1 lister, rest, cache, reference and a test helper's are fine)", got, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("violation %d = %q, want %q…", i, got[i], w)
		}
	}
}

func TestAllowListPermitsExactlyItsLines(t *testing.T) {
	a, err := ParseAllow("allow.txt", `# known
extender pkg/cache -- issue 1
extender pkg/daemon -- issue 1
testhelper pkg/state internal/testenv -- issue 2
cmd cmd/warmd 200 9 pkg/cache -- issue 3
backedge pkg/peer pkg/cache -- issue 4
backedge pkg/prewarm pkg/extender -- nothing needs this one
`)
	if err != nil {
		t.Fatal(err)
	}
	if v := Check(tangled(), a); len(v) != 0 {
		t.Errorf("allowed violations reported: %q", v)
	}
	if u := a.Unused(); len(u) != 1 || !strings.Contains(u[0], "allow.txt:7: backedge pkg/prewarm pkg/extender") {
		t.Errorf("unused entries %q, want only line 7", u)
	}
	// The cmd ceilings are ceilings: one more func fails.
	m := tangled()
	m["cmd/warmd"].Funcs = 10
	if v := Check(m, a); len(v) != 1 || !strings.Contains(v[0], "10 funcs") {
		t.Errorf("a cmd over its ceiling: %q", v)
	}
}

func TestAllowListNeedsAReason(t *testing.T) {
	for _, line := range []string{"extender pkg/cache", "extender pkg/cache -- ", "backedge a -- why", "cmd cmd/x many 3 pkg/a -- why", "other a b -- why"} {
		if _, err := ParseAllow("f", line+"\n"); err == nil || !strings.Contains(err.Error(), "f:1") {
			t.Errorf("%q: err %v, want one naming f:1", line, err)
		}
	}
}

func TestMermaidIsStableAndMarksBackEdges(t *testing.T) {
	back := map[[2]string]bool{{"pkg/peer", "pkg/cache"}: true}
	a, b := Mermaid(tangled(), back), Mermaid(tangled(), back)
	if a != b {
		t.Fatal("two drawings of one graph differ")
	}
	for _, want := range []string{"pkg_peer[pkg/peer] -.->|back up, allowed| pkg_cache[pkg/cache]", "pkg_cache[pkg/cache] --> pkg_peer[pkg/peer]", "cmd_warmd[cmd/warmd] --> pkg_cli[pkg/cli]"} {
		if !strings.Contains(a, want) {
			t.Errorf("drawing lacks %q:\n%s", want, a)
		}
	}
	if strings.Contains(a, "internal") {
		t.Errorf("the drawing holds test helpers:\n%s", a)
	}
}
