package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
)

// countFile returns a Go file's lines and its top-level func declarations (methods included).
func countFile(path string) (lines, funcs int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("count %s: %w", path, err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, b, parser.SkipObjectResolution)
	if err != nil {
		return 0, 0, fmt.Errorf("count %s: %w", path, err)
	}
	for _, d := range f.Decls {
		if _, ok := d.(*ast.FuncDecl); ok {
			funcs++
		}
	}
	return strings.Count(string(b), "\n"), funcs, nil
}
