//go:build race

package scripts_test

// raceFlag builds warmd the way this test binary was built, so `go test -race ./...` reuses the
// packages it already compiled.
var raceFlag = []string{"-race"}
