package weights

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestBufPoolDropsBuffersWhenIdle: when the last fetch leaves, the pool gives its idle buffers back to
// the heap (a warm node at rest holds none); a buffer still out then is counted until it returns, so
// the bound holds across rounds.
func TestBufPoolDropsBuffersWhenIdle(t *testing.T) {
	ctx := context.Background()
	p := newBufPool(4096, 3)
	p.enter()
	p.enter()
	a, _ := p.get(ctx)
	b, _ := p.get(ctx)
	p.put(a)
	p.leave()
	if p.made != 2 || len(p.ch) != 1 {
		t.Fatalf("with a fetch still running: made %d, idle %d; want 2 and 1 (nothing dropped)", p.made, len(p.ch))
	}
	p.leave()
	if p.made != 1 || len(p.ch) != 0 {
		t.Fatalf("after the last fetch left: made %d, idle %d; want 1 (the buffer still out) and 0", p.made, len(p.ch))
	}
	p.put(b)
	p.enter()
	for range 3 {
		if _, err := p.get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if p.made != 3 {
		t.Fatalf("made %d buffers in the next round, want the bound 3", p.made)
	}
}

// A chunk smaller than a pooled buffer is read through a buffer its size, so a model's small files
// take none of the pool's MiB buffers; a chunk as big as a buffer takes one. Both write their bytes.
func TestSmallChunksTakeNoPooledBuffer(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "staged"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := newBufPool(64<<10, 2)
	data := bytes.Repeat([]byte("weights!"), 96<<10/8)
	for _, tc := range []struct {
		off, n int64
		made   int
	}{{0, 5000, 0}, {5000, 17<<10 - 5000, 0}, {17 << 10, 64 << 10, 1}} {
		w := &chunkWriter{ctx: context.Background(), f: f, off: tc.off, pool: p, want: tc.n, onBytes: func(int64) {}}
		if n, err := w.ReadFrom(bytes.NewReader(data[tc.off : tc.off+tc.n])); err != nil || n != tc.n {
			t.Fatalf("chunk at %d: wrote %d, %v; want %d", tc.off, n, err, tc.n)
		}
		if p.made != tc.made {
			t.Errorf("a chunk of %d bytes with %d-byte pooled buffers: pool made %d, want %d", tc.n, p.size, p.made, tc.made)
		}
	}
	got, err := os.ReadFile(f.Name())
	if err != nil || !bytes.Equal(got, data[:81<<10]) {
		t.Fatalf("staged file: %d bytes, %v; want the three chunks in place", len(got), err)
	}
}
