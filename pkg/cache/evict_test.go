package cache

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/objstore"
)

// writeHashDir writes one vLLM torch_compile_cache/<hash> tree of n bytes.
func writeHashDir(t *testing.T, m *Manager, hash string, n int) {
	t.Helper()
	d := filepath.Join(m.Layout().Dir(ComponentVLLM), "torch_compile_cache", hash, "rank_0_0", "backbone")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "vllm_compile_cache.py"), []byte(strings.Repeat(hash, n/len(hash))), 0o644); err != nil {
		t.Fatal(err)
	}
}

func hashDirExists(m *Manager, hash string) bool {
	_, err := os.Stat(filepath.Join(m.Layout().Dir(ComponentVLLM), "torch_compile_cache", hash, "rank_0_0", "backbone", "vllm_compile_cache.py"))
	return err == nil
}

// TestEvictionHonoursInUseTrees: over budget, the least recently used bundle goes first, unless a
// running pod uses its tree; use is what MarkUsed recorded, not atime.
func TestEvictionHonoursInUseTrees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := time.Unix(1_000_000, 0)
	var inUse []string
	store := objstore.NewMemory()
	m := newManager(t, skuA, store, "cache-evict", func(o *Options) {
		o.Budget = 250 << 10
		o.MinIdle = 30 * time.Second
		o.Now = func() time.Time { return clock }
		o.InUse = func() []string { return inUse }
	})
	// Three model hash dirs of 100 KiB, captured at t0, t0+1m, t0+2m.
	for _, h := range []string{"aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"} {
		writeHashDir(t, m, h, 100<<10)
		if _, err := m.Capture(ctx); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(time.Minute)
	}
	if _, err := m.Upload(ctx); err != nil {
		t.Fatal(err)
	}
	// A pod started with model b a minute ago; model a's pod is still running (in use) but started
	// long ago; c, captured two minutes ago and not used since, is the one to go.
	m.MarkUsed("vllm/torch_compile_cache/bbbbbbbbbb", clock)
	inUse = []string{"vllm/torch_compile_cache/aaaaaaaaaa"}
	clock = clock.Add(time.Minute)

	res, err := m.Evict()
	if err != nil {
		t.Fatal(err)
	}
	if !hashDirExists(m, "aaaaaaaaaa") {
		t.Fatal("evicted a tree a running pod uses")
	}
	if hashDirExists(m, "cccccccccc") || !hashDirExists(m, "bbbbbbbbbb") {
		t.Fatalf("want c (least recently used, not in use) evicted and b kept; evicted %d bundles", len(res.Evicted))
	}
	if len(res.Evicted) != 1 || res.Over != 0 {
		t.Fatalf("evicted %d, over %d; want 1 and under budget", len(res.Evicted), res.Over)
	}
	if _, err := os.Stat(filepath.Join(m.Layout().Dir(ComponentVLLM), "torch_compile_cache", "cccccccccc")); !os.IsNotExist(err) {
		t.Fatal("evicted tree's empty dirs were left")
	}
	// The evicted bundle stays evicted: a restore within the hold does not bring it back.
	if r, err := m.Restore(ctx); err != nil || len(r.Restored) != 0 {
		t.Fatalf("restore right after eviction fetched %d (%v)", len(r.Restored), err)
	}
	clock = clock.Add(7 * time.Hour)
	if r, err := m.Restore(ctx); err != nil || len(r.Restored) != 1 || !hashDirExists(m, "cccccccccc") {
		t.Fatalf("restore after the hold: %d restored (%v)", len(r.Restored), err)
	}

	// Everything in use: nothing is evicted even over budget, and the overshoot is reported.
	inUse = []string{""}
	res, err = m.Evict()
	if err != nil || len(res.Evicted) != 0 || res.Over == 0 {
		t.Fatalf("all in use: evicted %d, over %d (%v)", len(res.Evicted), res.Over, err)
	}
}

func TestReportStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := objstore.NewMemory()
	a := newManager(t, skuA, store, "cache-hits")
	writeHashDir(t, a, "1111111111", 1000)
	a.Capture(ctx)
	a.Upload(ctx)
	b := newManager(t, skuA, store, "cache-hits")
	if v := b.ReportStart(StartReport{Time: time.Now(), Compiled: true}); v.Miss || v.Hit {
		t.Fatalf("compile before any restore counted as %+v; it is a cold start", v)
	}
	if _, err := b.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	for _, tc := range []struct {
		name   string
		r      StartReport
		hit    bool
		miss   bool
		reason string
	}{
		{"hit", StartReport{Time: later, CacheDir: "/warmd/compile-cache/vllm/torch_compile_cache/1111111111/rank_0_0/backbone"}, true, false, ""},
		{"miss, other hash", StartReport{Time: later, Compiled: true, CacheDir: "/root/.cache/vllm/torch_compile_cache/2222222222", VLLMVersion: "0.11.0"}, false, true, "vLLM used cache dir 2222222222 but the restored bundles hold 1111111111"},
		{"miss, same hash", StartReport{Time: later, Compiled: true, CacheDir: "torch_compile_cache/1111111111"}, false, true, "was restored but vLLM compiled anyway"},
		{"miss, no dir", StartReport{Time: later, Compiled: true}, false, true, "names no cache dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := b.ReportStart(tc.r)
			if v.Hit != tc.hit || v.Miss != tc.miss || !strings.Contains(v.Reason, tc.reason) {
				t.Fatalf("verdict %+v, want hit=%v miss=%v reason ~ %q", v, tc.hit, tc.miss, tc.reason)
			}
		})
	}
	if st := b.Stats(); st.Hits != 1 || st.Misses != 3 || st.LastMiss == "" {
		t.Fatalf("stats %+v", st)
	}
	// The hit marked the hash dir used.
	for _, r := range b.Records() {
		if !r.LastUsed.Equal(later.UTC()) {
			t.Fatalf("record %s last used %v, want %v", r.SHA256[:8], r.LastUsed, later)
		}
	}
}
