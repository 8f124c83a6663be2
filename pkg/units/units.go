// Package units spells sizes and rates one way for people: every command's output and `warmd
// status` use it, so a number reads the same wherever it is shown. It imports nothing of warmd, so
// the status renderer and the command line can both use it without importing each other.
package units

import "fmt"

// Bytes formats n bytes in binary units ("512 B", "1.5 GiB").
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Rate formats a transfer rate in bytes per second, in decimal units as transfer rates are quoted
// ("850 MB/s", "1.25 GB/s").
func Rate(bps float64) string {
	if bps >= 1e9 {
		return fmt.Sprintf("%.2f GB/s", bps/1e9)
	}
	return fmt.Sprintf("%.0f MB/s", bps/1e6)
}
