package daemon

import (
	"runtime"
	"testing"
)

// sink keeps the test's allocations from being optimised away.
var sink [][]byte

// TestTrimGivesFreeHeapBack: garbage of a warm-up (64 MiB of buffers dropped) stays resident as free
// heap until trimOnce hands it back; a heap with little free is left alone.
func TestTrimGivesFreeHeapBack(t *testing.T) {
	for range 64 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil
	runtime.GC() // the buffers are now free heap, still resident
	if free := heapFree(); free < 32<<20 {
		t.Fatalf("after dropping 64 MiB the heap holds %d bytes free: the metric %s does not say what it should", free, heapFreeMetric)
	}
	if !trimOnce(trimAbove) {
		t.Fatal("trimOnce did nothing with more than trimAbove free")
	}
	if free := heapFree(); free > trimAbove {
		t.Fatalf("after trimOnce the heap still holds %d bytes free, want ≤ %d", free, trimAbove)
	}
	if trimOnce(1 << 40) {
		t.Fatal("trimOnce trimmed below its threshold")
	}
}
