package inflate

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"testing"
	"time"
)

// TestPoolMakesBuffersWhenNeeded: a small layer's decode takes the one or two buffers it fills, not
// the pool's whole bound, and the bound still holds (the next get waits for a release).
func TestPoolMakesBuffersWhenNeeded(t *testing.T) {
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	if _, err := w.Write(bytes.Repeat([]byte("small layer "), 20<<10)); err != nil { // 240 KiB
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	pool := NewPool(DefaultPoolChunks, DefaultChunkSize)
	if _, err := Decode(context.Background(), &z, func(c *Chunk) error { c.Release(); return nil }, Options{Pool: pool}); err != nil {
		t.Fatal(err)
	}
	if pool.made > 2 {
		t.Fatalf("a 240 KiB decode made %d of the pool's %d 1 MiB buffers, want ≤ 2", pool.made, pool.Cap())
	}

	small := NewPool(2, 64)
	ctx := context.Background()
	a, err := small.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.get(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := small.get(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third get from a pool of 2 returned %v, want it to wait until its context ends", err)
	}
	small.put(a)
	if b, err := small.get(ctx); err != nil || &b[0] != &a[0] {
		t.Fatalf("get after a release did not hand back the released buffer (err %v)", err)
	}
	if small.made != 2 {
		t.Fatalf("made %d buffers, want 2", small.made)
	}
}
