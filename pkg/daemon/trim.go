package daemon

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// heapFreeMetric is the Go heap's memory that is free but still held from the OS (resident, counted
// in RSS): what a warm-up's transient buffers leave behind once they are garbage.
const heapFreeMetric = "/memory/classes/heap/free:bytes"

// trimEvery and trimAbove: once a minute, a heap holding more than 4 MiB it no longer uses gives it
// back. The runtime alone keeps up to its next GC goal (twice the live heap) resident on a daemon
// that then sits idle for days, and a forced GC of warmd's few-MiB live heap costs milliseconds.
const (
	trimEvery = time.Minute
	trimAbove = 4 << 20
)

// trimHeap returns idle heap memory to the OS every `every` while more than `above` bytes of it are
// free, until ctx ends.
func trimHeap(ctx context.Context, every time.Duration, above uint64) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			trimOnce(above)
		}
	}
}

// trimOnce gives free heap memory back when more than above bytes of it are held, and says whether it did.
func trimOnce(above uint64) bool {
	if heapFree() <= above {
		return false
	}
	debug.FreeOSMemory()
	return true
}

// heapFree reads heapFreeMetric.
func heapFree() uint64 {
	s := []metrics.Sample{{Name: heapFreeMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
