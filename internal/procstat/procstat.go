// Package procstat reads a process's memory figures from /proc/<pid>/status for the tests and
// benches that bound warmd's own memory (test/idle, test/security): one parser, so every bound
// reads the same field the same way.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// StatusKiB is field's value in KiB in /proc/<pid>/status ("VmHWM", the peak resident set since
// exec; "VmRSS", "RssAnon", "RssFile", …).
func StatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, field, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
