package oci

import (
	"fmt"
	"sync"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"warmd.io/warmd/pkg/prefetch"
)

// TestTrackerCallsFnOneAtATime drives the tracker from as many goroutines as a parallel unpack has
// layers; the callback keeps unguarded state, so under -race a concurrent call is a failure, and the
// count of busy callers catches it without -race too.
func TestTrackerCallsFnOneAtATime(t *testing.T) {
	const layers = 16
	var r prefetch.Resolved
	for i := range layers {
		r.Layers = append(r.Layers, ocispec.Descriptor{Digest: digest.FromString(fmt.Sprint(i)), Size: 100})
	}
	var (
		busy, maxBusy, calls int
		last                 prefetch.Progress
		mu                   sync.Mutex // only for busy: the rest is deliberately unguarded
	)
	tr := NewTracker(r, func(p prefetch.Progress) {
		mu.Lock()
		busy++
		maxBusy = max(maxBusy, busy)
		mu.Unlock()
		calls++
		last = p
		time.Sleep(50 * time.Microsecond) // widen the window two overlapping calls would share
		mu.Lock()
		busy--
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for _, l := range r.Layers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr.Set(l.Digest, 50, false)
			tr.Set(l.Digest, -1, true)
			tr.Unpacked(l.Digest, prefetch.LayerUnpack{By: "warmd"})
		}()
	}
	wg.Wait()
	if maxBusy != 1 {
		t.Fatalf("fn ran %d at once, want 1", maxBusy)
	}
	if calls != 3*layers {
		t.Fatalf("fn called %d times, want %d", calls, 3*layers)
	}
	unpacked := 0
	for _, l := range last.Layers {
		if l.Unpack != nil {
			unpacked++
		}
	}
	// Snapshots reach fn in the order they were taken, so the last one seen holds every layer's unpack.
	if unpacked != layers || last.Phase != prefetch.StateUnpacking {
		t.Fatalf("last snapshot has %d of %d layers unpacked, phase %s", unpacked, layers, last.Phase)
	}
}
