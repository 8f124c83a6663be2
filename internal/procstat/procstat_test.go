package procstat

import (
	"os"
	"testing"
)

func TestStatusKiB(t *testing.T) {
	hwm, err := StatusKiB(os.Getpid(), "VmHWM")
	if err != nil || hwm <= 0 {
		t.Fatalf("VmHWM of this process = %d, %v", hwm, err)
	}
	// (VmHWM is updated lazily, so VmRSS read after it may exceed it by a few pages.)
	if rss, err := StatusKiB(os.Getpid(), "VmRSS"); err != nil || rss <= 0 {
		t.Errorf("VmRSS = %d, %v", rss, err)
	}
	if _, err := StatusKiB(os.Getpid(), "NoSuchField"); err == nil {
		t.Error("a missing field read without an error")
	}
}
