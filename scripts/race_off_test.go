//go:build !race

package scripts_test

// raceFlag builds warmd the way this test binary was built (see race_on_test.go).
var raceFlag []string
