package cache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"warmd.io/warmd/pkg/cache/bundle"
	"warmd.io/warmd/pkg/cache/cachetest"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
)

// TestTwoNodesExchangeAndOtherSKURefuses: node A compiles, captures and uploads; node B of the same
// SKU restores A's tree exactly and shares its own new kernel back; node C of another SKU finds
// nothing under its own prefix and refuses A's objects even when they are copied under it.
func TestTwoNodesExchangeAndOtherSKURefuses(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s objstore.Store, bucket string) {
		ctx := context.Background()
		a := newManager(t, skuA, s, bucket)
		b := newManager(t, skuA, s, bucket)
		if _, err := cachetest.Write(a.Layout().Root(), cachetest.Small); err != nil {
			t.Fatal(err)
		}
		capA, err := a.Capture(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := a.Upload(ctx); err != nil || n != len(capA.Bundles) {
			t.Fatalf("upload: %d of %d (%v)", n, len(capA.Bundles), err)
		}
		res, err := b.Restore(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Restored) != len(capA.Bundles) || len(res.Refused) != 0 {
			t.Fatalf("B restored %d of %d bundles, refused %v", len(res.Restored), len(capA.Bundles), res.Refused)
		}
		wantA := cachetest.Sums(t, a.Layout().Root())
		for k := range wantA {
			if ignored(k[strings.IndexByte(k, '/')+1:]) {
				delete(wantA, k) // locks and logs are never shared
			}
		}
		if got := cachetest.Sums(t, b.Layout().Root()); !maps.Equal(got, wantA) {
			t.Fatalf("B's tree differs from A's: %d vs %d files", len(got), len(wantA))
		}
		// B's restored files are known: B captures nothing of them, and a second restore is a no-op.
		if c, _ := b.Capture(ctx); len(c.Bundles) != 0 {
			t.Fatalf("B re-captured %d restored bundles", len(c.Bundles))
		}
		if r, _ := b.Restore(ctx); len(r.Restored) != 0 {
			t.Fatalf("second restore fetched %d bundles again", len(r.Restored))
		}

		// B compiles a new kernel; A gets it.
		kdir := filepath.Join(b.Layout().Dir(ComponentTriton), "BNEWKERNEL")
		os.MkdirAll(kdir, 0o755)
		os.WriteFile(filepath.Join(kdir, "k.cubin"), []byte("kernel from B"), 0o644)
		if _, err := b.Capture(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Upload(ctx); err != nil {
			t.Fatal(err)
		}
		if r, err := a.Restore(ctx); err != nil || len(r.Restored) != 1 {
			t.Fatalf("A restored %d of B's bundles (%v)", len(r.Restored), err)
		}
		if got, _ := os.ReadFile(filepath.Join(a.Layout().Dir(ComponentTriton), "BNEWKERNEL", "k.cubin")); string(got) != "kernel from B" {
			t.Fatalf("A's copy of B's kernel: %q", got)
		}

		// Node C, another SKU: nothing under its prefix.
		c := newManager(t, skuB, s, bucket)
		if r, err := c.Restore(ctx); err != nil || len(r.Restored) != 0 {
			t.Fatalf("C restored %d bundles of its empty prefix (%v)", len(r.Restored), err)
		}
		// Someone copies SKU A's index and bundles under SKU B's prefix: C refuses, and says so.
		copyPrefix(t, s, bucket, a.share, c.share)
		_, err = c.Restore(ctx)
		if !errors.Is(err, ErrOtherSKU) || !strings.Contains(err.Error(), skuA) || !strings.Contains(err.Error(), skuB) {
			t.Fatalf("C restoring A's copied index: err = %v, want ErrOtherSKU naming both SKUs", err)
		}
		// Even with an index that claims SKU B, the bundles' own manifests say A.
		forged := Index{Schema: 1, SKU: skuB, Generation: 0}
		for _, r := range a.Records() {
			forged.Bundles = append(forged.Bundles, indexEntry(&r))
		}
		putJSON(t, s, bucket, c.share.IndexKey(), forged)
		for i := int64(1); i < 100; i++ {
			if _, err := s.Head(ctx, bucket, c.share.genKey(i)); err != nil {
				break
			}
			putJSON(t, s, bucket, c.share.genKey(i), Index{Schema: 1, SKU: skuB, Generation: i, Bundles: forged.Bundles})
		}
		r, err := c.Restore(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Restored) != 0 || len(r.Refused) == 0 || !strings.Contains(strings.Join(r.Refused, "\n"), "built on SKU") {
			t.Fatalf("C with a forged index: restored %d, refused %v", len(r.Restored), r.Refused)
		}
		if f := cachetest.Sums(t, c.Layout().Root()); len(f) != 0 {
			t.Fatalf("refused bundles left files in C's tree: %v", f)
		}
		if st := c.Stats(); st.Rejected == 0 || len(st.Refused) == 0 {
			t.Fatalf("C's stats do not show the refusal: %+v", st)
		}
	})
}

// copyPrefix copies every object of one SKU's prefix to another's (an operator's mistake).
func copyPrefix(t *testing.T, s objstore.Store, bucket string, from, to *Share) {
	t.Helper()
	ctx := context.Background()
	objs, err := s.List(ctx, bucket, from.base()+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		var buf bytes.Buffer
		if _, err := s.Get(ctx, bucket, o.Key, &buf); err != nil {
			t.Fatal(err)
		}
		key := to.base() + strings.TrimPrefix(o.Key, from.base())
		if err := objstore.PutBytes(ctx, s, bucket, key, buf.Bytes(), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func putJSON(t *testing.T, s objstore.Store, bucket, key string, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := objstore.PutBytes(context.Background(), s, bucket, key, b, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentPublishKeepsEveryEntry: many nodes of one SKU publish at once; every entry ends up in
// the newest index, and every generation is a complete index containing its predecessor.
func TestConcurrentPublishKeepsEveryEntry(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s objstore.Store, bucket string) {
		ctx := context.Background()
		const nodes, rounds = 6, 4
		var wg sync.WaitGroup
		errs := make(chan error, nodes*rounds)
		for n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sh := &Share{Store: s, Bucket: bucket, Prefix: "p", SKU: skuA}
				for r := range rounds {
					e := IndexEntry{SHA256: fmt.Sprintf("%064x", n*1000+r+1), Component: ComponentTriton, Node: fmt.Sprint(n)}
					if _, err := sh.Publish(ctx, []IndexEntry{e}); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		sh := &Share{Store: s, Bucket: bucket, Prefix: "p", SKU: skuA}
		idx, err := sh.ReadIndex(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(idx.Bundles) != nodes*rounds {
			t.Fatalf("index holds %d entries, want %d", len(idx.Bundles), nodes*rounds)
		}
		prev := map[string]bool{}
		for g := int64(1); g <= idx.Generation; g++ {
			gi, err := sh.getIndex(ctx, sh.genKey(g))
			if err != nil {
				t.Fatalf("generation %d: %v", g, err)
			}
			cur := map[string]bool{}
			for _, e := range gi.Bundles {
				cur[e.SHA256] = true
			}
			for k := range prev {
				if !cur[k] {
					t.Fatalf("generation %d lost entry %s", g, k[:12])
				}
			}
			prev = cur
		}
		if idx.Generation != nodes*rounds {
			t.Fatalf("generation %d, want one per publish (%d)", idx.Generation, nodes*rounds)
		}
	})
}

// TestRestoreRejectsTamperedBundle: a bundle object whose bytes no longer match its name is refused
// (the published manifest or the digest catches it) and nothing of it lands in the tree.
func TestRestoreRejectsTamperedBundle(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s objstore.Store, bucket string) {
		ctx := context.Background()
		a := newManager(t, skuA, s, bucket)
		kdir := filepath.Join(a.Layout().Dir(ComponentTriton), "KEY")
		os.MkdirAll(kdir, 0o755)
		os.WriteFile(filepath.Join(kdir, "k.cubin"), []byte("genuine"), 0o644)
		capA, _ := a.Capture(ctx)
		if _, err := a.Upload(ctx); err != nil || len(capA.Bundles) != 1 {
			t.Fatal(err)
		}
		rec := capA.Bundles[0]
		// Replace the object with another valid bundle (different bytes, same name).
		other := t.TempDir()
		os.WriteFile(filepath.Join(other, "k.cubin"), []byte("evil"), 0o644)
		var buf bytes.Buffer
		bundle.Write(&buf, openRoot(t, other), []fsroot.Path{fsroot.MustPath("k.cubin")}, bundle.Manifest{SKU: skuA, Component: ComponentTriton})
		objstore.PutBytes(ctx, s, bucket, a.share.BundleKey(ComponentTriton, rec.SHA256), buf.Bytes(), objstore.PutOptions{})
		b := newManager(t, skuA, s, bucket)
		r, err := b.Restore(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Restored) != 0 || len(r.Refused) != 1 || !strings.Contains(r.Refused[0], "corrupt bundle") {
			t.Fatalf("restored %d, refused %v", len(r.Restored), r.Refused)
		}
		if f := cachetest.Sums(t, b.Layout().Root()); len(f) != 0 {
			t.Fatalf("tampered bundle left %v", f)
		}
	})
}

// TestExportImport: export on one node, import on another of the same SKU; another SKU refuses.
func TestExportImport(t *testing.T) {
	t.Parallel()
	a := newManager(t, skuA, nil, "")
	cachetest.Write(a.Layout().Root(), cachetest.Small)
	out := t.TempDir()
	files, err := a.Export(context.Background(), out)
	if err != nil || len(files) < 4 {
		t.Fatalf("export wrote %d files (%v)", len(files), err)
	}
	b := newManager(t, skuA, nil, "")
	for _, f := range files {
		if _, err := b.Import(context.Background(), f, ""); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := len(cachetest.Sums(t, b.Layout().Root())), len(capturedPaths(b)); got != want || got == 0 {
		t.Fatalf("imported tree has %d files, records %d", got, want)
	}
	c := newManager(t, skuB, nil, "")
	_, err = c.Import(context.Background(), files[0], "")
	if !errors.Is(err, ErrOtherSKU) {
		t.Fatalf("import of another SKU's bundle: %v, want ErrOtherSKU", err)
	}
	if f := cachetest.Sums(t, c.Layout().Root()); len(f) != 0 {
		t.Fatalf("refused import left %v", f)
	}
}
