package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// The cmd rule's limits: a cmd/ package is a main that parses flags and hands off. 80 lines and 3
// funcs hold a main, a root command and an exit-code mapping; the imports are the CLI's.
const (
	cmdMaxLines = 80
	cmdMaxFuncs = 3
)

// cmdImports are the packages a cmd/ package may import: the commands' home and the version.
var cmdImports = map[string]bool{"pkg/cli": true, "pkg/version": true}

// Allow is the allow-list (hack/layering/allow.txt) of today's known violations, each naming the
// issue that removes it. A line is "<rule> <fields...> -- <why and the issue>":
//
//	extender <package>                       pkg/extender may link this part/daemon package
//	testhelper <package> <helper>            this production package may link this test helper
//	cmd <package> <max lines> <max funcs> <import,...>   ceilings and extra imports for a cmd/ package
//	backedge <folder> <folder>               this folder-level import runs back up (breaks the cycle)
type Allow struct {
	file  string
	lines map[string]int // the key of each entry → its line number
	cmd   map[string]cmdAllow
	used  map[string]bool
}

type cmdAllow struct {
	lines, funcs int
	imports      map[string]bool
}

// LoadAllow reads and parses the allow-list file.
func LoadAllow(file string) (*Allow, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("layering allow-list: %w", err)
	}
	return ParseAllow(file, string(b))
}

// ParseAllow parses allow-list text; every problem is reported at once.
func ParseAllow(file, text string) (*Allow, error) {
	a := &Allow{file: file, lines: map[string]int{}, cmd: map[string]cmdAllow{}, used: map[string]bool{}}
	var problems []string
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		head, why, ok := strings.Cut(l, " -- ")
		f := strings.Fields(head)
		want := map[string]int{"extender": 2, "testhelper": 3, "cmd": 5, "backedge": 3}
		if !ok || strings.TrimSpace(why) == "" || len(f) == 0 || want[f[0]] != len(f) {
			problems = append(problems, fmt.Sprintf("%s:%d: want \"<extender|testhelper|cmd|backedge> <fields> -- <why, issue>\" (see the file's head), got %q", file, n, l))
			continue
		}
		if f[0] == "cmd" {
			lines, err1 := strconv.Atoi(f[2])
			funcs, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: cmd ceilings must be numbers, got %q %q", file, n, f[2], f[3]))
				continue
			}
			imps := map[string]bool{}
			for _, i := range strings.Split(f[4], ",") {
				imps[i] = true
			}
			a.cmd[f[1]] = cmdAllow{lines, funcs, imps}
		}
		a.lines[strings.Join(f, " ")] = n
		if f[0] == "cmd" {
			a.lines["cmd "+f[1]] = n
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("layering allow-list: %s", strings.Join(problems, "; "))
	}
	return a, nil
}

func (a *Allow) allows(key string) bool {
	if _, ok := a.lines[key]; ok {
		a.used[key] = true
		return true
	}
	return false
}

// BackEdges returns the folder-level edges the list allows to run back up.
func (a *Allow) BackEdges() map[[2]string]bool {
	out := map[[2]string]bool{}
	for k := range a.lines {
		if f := strings.Fields(k); f[0] == "backedge" {
			out[[2]string{f[1], f[2]}] = true
		}
	}
	return out
}

// Unused returns the entries no violation needed any more ("file:line: entry"), for removal.
func (a *Allow) Unused() []string {
	var out []string
	for k, n := range a.lines {
		if !a.used[k] && !(strings.HasPrefix(k, "cmd ") && len(strings.Fields(k)) == 2) {
			out = append(out, fmt.Sprintf("%s:%d: %s", a.file, n, k))
		}
	}
	sort.Strings(out)
	return out
}

// Check applies every rule to pkgs and returns the violations the allow-list does not permit.
func Check(pkgs map[string]*Package, a *Allow) []string {
	var out []string
	out = append(out, checkExtender(pkgs, a)...)
	out = append(out, checkTestHelpers(pkgs, a)...)
	out = append(out, checkCmd(pkgs, a)...)
	out = append(out, checkCycles(pkgs, a)...)
	out = append(out, checkClientset(pkgs)...)
	sort.Strings(out)
	return out
}

// checkExtender: the extender (a Deployment beside the scheduler) links neither the daemon nor a
// part of it (a package that imports pkg/daemon implements a part or its seams).
func checkExtender(pkgs map[string]*Package, a *Allow) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range sorted(pkgs) {
		if Folder(p.Path) != "pkg/extender" {
			continue
		}
		for _, d := range p.Deps {
			dp := pkgs[d]
			isPart := dp != nil && contains(dp.Imports, "pkg/daemon")
			if (d != "pkg/daemon" && !isPart) || seen[d] {
				continue
			}
			seen[d] = true
			if !a.allows("extender " + d) {
				out = append(out, fmt.Sprintf("%s links %s (the daemon or one of its parts): the extender must not; move what it needs into a package that imports no part", p.Path, d))
			}
		}
	}
	return out
}

// clientsetPrefixes are client-go's packages that register or wrap every built-in API group (linking
// any of them puts about a third of the binary back), and its generic typed client and event
// recorder (which link its fake-client machinery and the OpenAPI models, ~1.4 MB): pkg/kube's doc,
// issue 26 item 7.
var clientsetPrefixes = []string{
	"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers", "k8s.io/client-go/listers/",
	"k8s.io/client-go/applyconfigurations", "k8s.io/client-go/discovery", "k8s.io/client-go/tools/leaderelection",
	"k8s.io/client-go/gentype", "k8s.io/client-go/tools/record", "k8s.io/client-go/testing",
}

// checkClientset: what ships talks to the API server through pkg/kube only, never through
// client-go's Clientset, informer factory, apply configurations, discovery, leader election, generic
// typed client or event recorder (the
// core/v1 listers are allowed: they link core/v1 alone). It has no allow-list entry: there is no
// known violation to wait for.
func checkClientset(pkgs map[string]*Package) []string {
	var out []string
	for _, p := range sorted(pkgs) {
		if !drawn(Folder(p.Path)) || isTestHelper(p.Path) {
			continue
		}
		for _, d := range p.Foreign {
			if d == "k8s.io/client-go/listers/core/v1" {
				continue
			}
			for _, pre := range clientsetPrefixes {
				if d == pre || strings.HasPrefix(d, strings.TrimSuffix(pre, "/")+"/") {
					out = append(out, fmt.Sprintf("%s links %s: use pkg/kube (warmd's narrow client) instead; client-go's Clientset and its kin link every API group, its generic client and event recorder the OpenAPI models", p.Path, d))
					break
				}
			}
		}
	}
	return out
}

// checkTestHelpers: what ships (pkg/ and cmd/, except the packages named *test that hold
// conformance suites and fakes) links no test helper: nothing of internal/, test/ or a *test package.
func checkTestHelpers(pkgs map[string]*Package, a *Allow) []string {
	var out []string
	for _, p := range sorted(pkgs) {
		if !drawn(Folder(p.Path)) || isTestHelper(p.Path) {
			continue
		}
		for _, d := range p.Deps {
			if strings.HasPrefix(d, "internal/") || strings.HasPrefix(d, "test/") || isTestHelper(d) {
				if !a.allows("testhelper " + p.Path + " " + d) {
					out = append(out, fmt.Sprintf("%s links the test helper %s: production code must not", p.Path, d))
				}
			}
		}
	}
	return out
}

// isTestHelper: a package with a path element named *test (pkg/cache/cachetest and its gen,
// pkg/state/statetest) holds fakes, conformance suites or their generators for tests.
func isTestHelper(path string) bool {
	for _, e := range strings.Split(path, "/") {
		if strings.HasSuffix(e, "test") {
			return true
		}
	}
	return false
}

// checkCmd: a cmd/ package holds a main that parses flags and hands off to pkg/cli: at most
// cmdMaxLines lines and cmdMaxFuncs funcs outside its tests, importing only cmdImports.
func checkCmd(pkgs map[string]*Package, a *Allow) []string {
	var out []string
	for _, p := range sorted(pkgs) {
		if !strings.HasPrefix(p.Path, "cmd/") {
			continue
		}
		lim := cmdAllow{cmdMaxLines, cmdMaxFuncs, nil}
		if c, ok := a.cmd[p.Path]; ok {
			lim = c
			a.used["cmd "+p.Path] = true
			for k := range a.lines {
				if strings.HasPrefix(k, "cmd "+p.Path+" ") {
					a.used[k] = true
				}
			}
		}
		if p.Lines > lim.lines || p.Funcs > lim.funcs {
			out = append(out, fmt.Sprintf("%s holds %d lines and %d funcs outside its tests (ceiling %d, %d): logic belongs in a package under pkg/", p.Path, p.Lines, p.Funcs, lim.lines, lim.funcs))
		}
		for _, imp := range p.Imports {
			if !cmdImports[imp] && !lim.imports[imp] {
				out = append(out, fmt.Sprintf("%s imports %s: a cmd/ package wires pkg/cli only", p.Path, imp))
			}
		}
	}
	return out
}

// checkCycles: with the allowed back edges taken out, the folder-level import graph has no cycle.
func checkCycles(pkgs map[string]*Package, a *Allow) []string {
	all := FolderEdges(pkgs)
	edges := map[[2]string]bool{}
	for e := range all {
		if a.allows("backedge " + e[0] + " " + e[1]) {
			continue
		}
		edges[e] = true
	}
	var out []string
	for _, scc := range Cycles(edges) {
		in := map[string]bool{}
		for _, f := range scc {
			in[f] = true
		}
		var why []string
		for e := range edges {
			if in[e[0]] && in[e[1]] {
				why = append(why, fmt.Sprintf("%s -> %s (%s)", e[0], e[1], strings.Join(all[e], ", ")))
			}
		}
		sort.Strings(why)
		out = append(out, fmt.Sprintf("folder-level import cycle among %s: %s", strings.Join(scc, ", "), strings.Join(why, "; ")))
	}
	return out
}

func sorted(pkgs map[string]*Package) []*Package {
	out := make([]*Package, 0, len(pkgs))
	for _, p := range pkgs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
