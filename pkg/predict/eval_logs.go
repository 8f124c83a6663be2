package predict

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"warmd.io/warmd/pkg/phases"
)

// UnknownSKU is the SKU StartsFromLogs gives starts whose GPU the log does not name.
const UnknownSKU = "unknown"

// StartsFromLogs parses vLLM container logs, one start each, into the history LeaveOneOut reads:
// this is how the predictor is measured on real starts (pkg/phases/testdata/real-*.log) rather than
// on generated ones. Each log is its own node (they come from different machines) of UnknownSKU (a
// vLLM log does not name its GPU); the model is the one vLLM printed. reference supplies the year
// vLLM's own clock lacks. Starts that did not become ready are skipped, as LeaveOneOut would.
func StartsFromLogs(paths []string, reference time.Time) ([]Start, error) {
	var out []Start
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("read start log: %w", err)
		}
		res, err := phases.Parse(f, phases.Options{Source: p, Reference: reference})
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("parse start log %s: %w", p, err)
		}
		if st, ok := FromResult(filepath.Base(p), UnknownSKU, "", reference, res); ok {
			out = append(out, st)
		}
	}
	return out, nil
}
