package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// MainWithWarmd is the TestMain of a package that runs the real warmd program, as the DaemonSet does:
// it sets *bin to the binary in the environment variable env when that is set (a binary built
// elsewhere, e.g. from an older commit to show that a test fails there, or the bin/warmd make built),
// else builds warmd from this checkout into a temp dir; then it runs the tests, removes what it built
// and exits with their code.
func MainWithWarmd(m interface{ Run() int }, bin *string, env string) {
	if *bin = os.Getenv(env); env != "" && *bin != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "warmd-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = filepath.Join(dir, "warmd")
	build := exec.Command("go", "build", "-o", *bin, "warmd.io/warmd/cmd/warmd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	build.Env = append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=-buildvcs=false")
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build warmd for the tests:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
