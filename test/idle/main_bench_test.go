//go:build bench

package idle

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// warmdBin is the warmd binary TestMain builds from this checkout: the benchmark measures the real
// program, as the DaemonSet runs it.
var warmdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "warmd-idle-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	warmdBin = filepath.Join(dir, "warmd")
	build := exec.Command("go", "build", "-o", warmdBin, "warmd.io/warmd/cmd/warmd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	build.Env = append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=-buildvcs=false")
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build warmd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
