package prewarm

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// MemInfo is where MemAvailable is read.
const MemInfo = "/proc/meminfo"

// MemAvailable returns the kernel's estimate of memory available for new work without swapping
// (page cache it can drop included), in bytes, from a /proc/meminfo-format file.
func MemAvailable(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("prewarm: read %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 || string(f[0]) != "MemAvailable:" {
			continue
		}
		kb, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("prewarm: %s: MemAvailable %q is not a size", path, f[1])
		}
		if len(f) > 2 && string(f[2]) != "kB" {
			return 0, fmt.Errorf("prewarm: %s: MemAvailable in %q, not kB", path, f[2])
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("prewarm: %s has no MemAvailable line", path)
}

// Budget is the bytes one pre-warm may read: the smaller of maxBytes and percent of memAvailable,
// less what running pre-warms already hold (they fill the same page cache); never negative.
func Budget(maxBytes int64, percent int, memAvailable, held int64) int64 {
	pct := int64(percent)
	share := memAvailable/100*pct + memAvailable%100*pct/100 // exact, and no overflow near 1<<62
	b := min(maxBytes, share) - held
	return max(b, 0)
}
