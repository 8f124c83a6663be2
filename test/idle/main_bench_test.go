//go:build bench

package idle

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// warmdBin is the warmd binary the benchmark measures, the real program as the DaemonSet runs it:
// WARMD_BIN when set (make bench-idle passes the bin/warmd it built), else TestMain builds it from
// this checkout.
var warmdBin string

func TestMain(m *testing.M) {
	if warmdBin = os.Getenv("WARMD_BIN"); warmdBin != "" {
		os.Exit(m.Run())
	}
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
