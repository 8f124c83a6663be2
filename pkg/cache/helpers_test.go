package cache

import (
	"context"
	"testing"

	"warmd.io/warmd/pkg/cache/cachetest"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/objstore/objstoretest"
)

const (
	skuA = "nvidia-h200.sm90.cuda13.0.drv580-1a2b3c4d"
	skuB = "nvidia-h100-80gb-hbm3.sm90.cuda12.8.drv570-5e6f7a8b"
)

// versity returns a client for the test versitygw and a fresh "cache-" bucket.
func versity(t *testing.T) (objstore.Store, string) {
	t.Helper()
	return objstoretest.Versity(t, "cache", objstore.Options{})
}

// stores runs f against the in-memory fake and, when it is running, versitygw.
func stores(t *testing.T, f func(t *testing.T, s objstore.Store, bucket string)) {
	t.Run("memory", func(t *testing.T) { f(t, objstore.NewMemory(), "cache-mem") })
	t.Run("versitygw", func(t *testing.T) {
		s, b := versity(t)
		f(t, s, b)
	})
}

func newManager(t *testing.T, sku string, store objstore.Store, bucket string, mod ...func(*Options)) *Manager {
	t.Helper()
	o := Options{DataDir: t.TempDir(), SKU: sku, Node: "node-" + sku[:6], Store: store, Bucket: bucket, Prefix: "warmd/cc"}
	for _, f := range mod {
		f(&o)
	}
	m, err := NewManager(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// openRoot opens dir as an fsroot.Root for the test's life.
func openRoot(t *testing.T, dir string) *fsroot.Root {
	t.Helper()
	r, err := fsroot.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// capturedPaths lists "<component>/<path>" of every file in m's live records.
func capturedPaths(m *Manager) map[string]bool {
	out := map[string]bool{}
	for _, r := range m.Records() {
		if !r.Live() {
			continue
		}
		for _, e := range r.Manifest.Entries {
			if e.Type == "file" {
				out[r.Manifest.Component+"/"+e.Path] = true
			}
		}
	}
	return out
}

// shareSmall fills m's tree with the small generated cache, captures and uploads it: the first node
// of a SKU, as the peer and kept-bundle tests start.
func shareSmall(t *testing.T, m *Manager) CaptureResult {
	t.Helper()
	if _, err := cachetest.Write(m.Layout().Root(), cachetest.Small); err != nil {
		t.Fatal(err)
	}
	capd, err := m.Capture(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Upload(context.Background()); err != nil {
		t.Fatal(err)
	}
	return capd
}
