package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
)

// Module is the import path every package of the repository starts with.
const Module = "warmd.io/warmd"

// Package is what the rules read of one package of the module (`go list -json`), with paths
// relative to the module ("pkg/cache").
type Package struct {
	Path string
	// Imports and Deps are the module's own packages that the non-test files import directly and
	// link in all (transitively).
	Imports, Deps []string
	// Foreign are the packages outside the module that it links (transitively).
	Foreign []string
	// Lines counts the non-test .go files' lines; Funcs their top-level func declarations.
	Lines, Funcs int
}

// Load runs `go list -json` over the module in dir and returns its packages by path.
func Load(dir string) (map[string]*Package, error) {
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	pkgs := map[string]*Package{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath, Dir string
			GoFiles         []string
			CgoFiles        []string
			Imports, Deps   []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		pkg := &Package{Path: rel(p.ImportPath), Imports: own(p.Imports), Deps: own(p.Deps), Foreign: foreign(p.Deps)}
		for _, f := range append(p.GoFiles, p.CgoFiles...) {
			lines, funcs, err := countFile(p.Dir + "/" + f)
			if err != nil {
				return nil, err
			}
			pkg.Lines += lines
			pkg.Funcs += funcs
		}
		pkgs[pkg.Path] = pkg
	}
	return pkgs, nil
}

func rel(importPath string) string { return strings.TrimPrefix(importPath, Module+"/") }

// own keeps the module's packages of paths, relative.
func own(paths []string) []string {
	var out []string
	for _, p := range paths {
		if strings.HasPrefix(p, Module+"/") {
			out = append(out, rel(p))
		}
	}
	return out
}

// foreign keeps the packages of paths outside the module.
func foreign(paths []string) []string {
	var out []string
	for _, p := range paths {
		if !strings.HasPrefix(p, Module+"/") {
			out = append(out, p)
		}
	}
	return out
}

// Folder is the top-level unit the layering is drawn in: the first two elements of a path
// ("pkg/cache" for pkg/cache/bundle, "cmd/warmd", "internal/testenv").
func Folder(path string) string {
	parts := strings.SplitN(path, "/", 3)
	if len(parts) < 2 {
		return path
	}
	return parts[0] + "/" + parts[1]
}

// FolderEdges returns, for each folder-level import "A -> B" (A ≠ B), the package-level imports
// that make it, sorted.
func FolderEdges(pkgs map[string]*Package) map[[2]string][]string {
	edges := map[[2]string][]string{}
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			a, b := Folder(p.Path), Folder(imp)
			if a != b {
				edges[[2]string{a, b}] = append(edges[[2]string{a, b}], p.Path+" -> "+imp)
			}
		}
	}
	for _, v := range edges {
		sort.Strings(v)
	}
	return edges
}

// Cycles returns the strongly connected components of more than one folder in the graph of edges
// (Tarjan's algorithm), each sorted, in a stable order.
func Cycles(edges map[[2]string]bool) [][]string {
	next := map[string][]string{}
	nodes := map[string]bool{}
	for e := range edges {
		next[e[0]] = append(next[e[0]], e[1])
		nodes[e[0]], nodes[e[1]] = true, true
	}
	var names []string
	for n := range nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sort.Strings(next[n])
	}
	index, low, onStack := map[string]int{}, map[string]int{}, map[string]bool{}
	var stack []string
	var out [][]string
	var visit func(string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range next[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var scc []string
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			scc = append(scc, w)
			if w == v {
				break
			}
		}
		if len(scc) > 1 {
			sort.Strings(scc)
			out = append(out, scc)
		}
	}
	for _, n := range names {
		if _, seen := index[n]; !seen {
			visit(n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// Mermaid draws the folder-level import graph of pkg/ and cmd/ (what the binary is made of) as a
// mermaid flowchart, one line per edge in sorted order, so the same code always draws the same text.
// Edges the allow-list names as running back up are drawn dashed.
func Mermaid(pkgs map[string]*Package, backEdges map[[2]string]bool) string {
	var lines []string
	for e := range FolderEdges(pkgs) {
		if !drawn(e[0]) || !drawn(e[1]) {
			continue
		}
		arrow := "-->"
		if backEdges[e] {
			arrow = "-.->|back up, allowed|"
		}
		lines = append(lines, fmt.Sprintf("  %s %s %s", node(e[0]), arrow, node(e[1])))
	}
	sort.Strings(lines)
	return "```mermaid\nflowchart LR\n" + strings.Join(lines, "\n") + "\n```\n"
}

func drawn(folder string) bool {
	return strings.HasPrefix(folder, "pkg/") || strings.HasPrefix(folder, "cmd/")
}

// node is a mermaid node id with the folder as its label ("pkg_cache[pkg/cache]").
func node(folder string) string {
	return strings.ReplaceAll(folder, "/", "_") + "[" + folder + "]"
}
