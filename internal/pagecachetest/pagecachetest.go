// Package pagecachetest measures how much of a file is in the page cache, for the tests of the parts
// that decide it (the weights' page-cache mode, the pre-warm).
package pagecachetest

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Resident is the fraction of path's pages in the page cache now, by mincore(2) over a read-only
// mapping of it (mapping faults nothing in; mincore only reports).
func Resident(t testing.TB, path string) float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() == 0 {
		return 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	// x/sys/unix has no Mincore wrapper on Linux; the raw call is mincore(addr, length, vec).
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return float64(n) / float64(len(vec))
}
