//go:build bench

package idle

import (
	"testing"

	"warmd.io/warmd/internal/testenv"
)

// warmdBin is the warmd binary the benchmark measures, the real program as the DaemonSet runs it:
// WARMD_BIN when set (make bench-idle passes the bin/warmd it built), else TestMain builds it from
// this checkout.
var warmdBin string

func TestMain(m *testing.M) { testenv.MainWithWarmd(m, &warmdBin, "WARMD_BIN") }
