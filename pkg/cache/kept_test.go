package cache

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
)

// keptNames lists the kept dir of m, temp files included.
func keptNames(t *testing.T, m *Manager) []string {
	t.Helper()
	ents, err := m.kept.ReadDir(fsroot.Path{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

func keep(o *Options) { o.KeepBundles = true }

// TestKeptBundlesBounded: a captured and uploaded bundle, and a restored one, are kept under their
// digest and nothing else (no temp left); once the SKU's index no longer references a bundle the next
// restore pass removes it (and anything else that is not a referenced bundle); an eviction removes the
// kept copy and counts it against the budget; bundles whose bytes fail their digest are never kept.
func TestKeptBundlesBounded(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s objstore.Store, bucket string) {
		ctx := context.Background()
		a := newManager(t, skuA, s, bucket, keep)
		capd := shareSmall(t, a)
		var digests []string
		for _, r := range capd.Bundles {
			digests = append(digests, r.SHA256)
		}
		slices.Sort(digests)
		if got := keptNames(t, a); !slices.Equal(got, digests) || len(got) < 2 {
			t.Fatalf("kept after capture: %v, want the captured digests %v", got, digests)
		}

		// A new index generation drops one bundle (as a rebuilt index would); a stray file is there too.
		idx, err := a.share.ReadIndex(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gone := idx.Bundles[0].SHA256
		next := idx
		next.Generation++
		next.Bundles = idx.Bundles[1:]
		body, _ := json.Marshal(next)
		if err := objstore.PutBytes(ctx, s, bucket, a.share.genKey(next.Generation), body, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := a.kept.WriteFile(fsroot.MustPath("stray"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Restore(ctx); err != nil {
			t.Fatal(err)
		}
		want := slices.DeleteFunc(slices.Clone(digests), func(d string) bool { return d == gone })
		if got := keptNames(t, a); !slices.Equal(got, want) {
			t.Fatalf("kept after the index dropped %s: %v, want %v", gone[:12], got, want)
		}

		// Another node restores from the bucket and keeps exactly what the index names.
		b := newManager(t, skuA, s, bucket, keep, func(o *Options) { o.Budget = 1; o.MinIdle = time.Nanosecond })
		if _, err := b.Restore(ctx); err != nil {
			t.Fatal(err)
		}
		if got := keptNames(t, b); !slices.Equal(got, want) {
			t.Fatalf("kept after a restore: %v, want %v", got, want)
		}
		if st := b.Stats(); st.OriginBytes == 0 || st.PeerBytes != 0 {
			t.Errorf("restore counted %d origin and %d peer bytes", st.OriginBytes, st.PeerBytes)
		}
		_, keptBytes := b.KeptBundles()
		tree, _, _ := b.TreeBytes()
		var treeBytes int64
		for _, n := range tree {
			treeBytes += n
		}
		time.Sleep(time.Millisecond)
		ev, err := b.Evict()
		if err != nil {
			t.Fatal(err)
		}
		if got := keptNames(t, b); len(got) != 0 || ev.Freed != treeBytes+keptBytes {
			t.Errorf("after evicting everything: kept %v, freed %d, want none and %d tree + %d kept bytes", got, ev.Freed, treeBytes, keptBytes)
		}

		// A bundle whose bytes in the bucket were flipped is refused and never kept.
		c := newManager(t, skuA, s, bucket, keep)
		e := next.Bundles[0]
		var raw rawBuffer
		if _, err := s.Get(ctx, bucket, a.share.BundleKey(e.Component, e.SHA256), &raw); err != nil {
			t.Fatal(err)
		}
		raw.b[len(raw.b)/2] ^= 0x01
		if err := objstore.PutBytes(ctx, s, bucket, a.share.BundleKey(e.Component, e.SHA256), raw.b, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		res, err := c.Restore(ctx)
		if err != nil || len(res.Refused) != 1 {
			t.Fatalf("restore of a flipped bundle: refused %v (%v)", res.Refused, err)
		}
		if got := keptNames(t, c); slices.Contains(got, e.SHA256) || len(got) != len(want)-1 {
			t.Errorf("kept after a corrupt download: %v (must hold the %d good bundles only)", got, len(want)-1)
		}
	})
}

type rawBuffer struct{ b []byte }

func (r *rawBuffer) Write(p []byte) (int, error) { r.b = append(r.b, p...); return len(p), nil }

// TestDropKept: a daemon that no longer keeps bundles (peers turned off) removes what an earlier run
// kept; one that keeps them leaves them.
func TestDropKept(t *testing.T) {
	t.Parallel()
	s := objstore.NewMemory()
	a := newManager(t, skuA, s, "cache-mem", keep)
	shareSmall(t, a)
	a.dropKept()
	if n, _ := a.KeptBundles(); n == 0 {
		t.Fatal("a manager that keeps bundles dropped them")
	}
	a.Close()
	b := newManager(t, skuA, s, "cache-mem", func(o *Options) { o.DataDir = a.o.DataDir })
	b.dropKept()
	if _, err := b.r.base.Lstat(keptRel); err == nil {
		t.Fatal("kept bundles stay after peers were turned off")
	}
}
