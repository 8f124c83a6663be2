package security

// What the compile-cache cases share: a World whose daemon has compile caches on (a recorded H100
// inventory gives it a cacheable SKU), the pod-written tree's paths, hand-made bundles (archive/tar
// and zstd directly: a hostile writer does not use warmd's), and a bucket layout written the way a
// node publishes (bundle object, manifest object, index generation and index.json).

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"warmd.io/warmd/pkg/cache"
)

// inventoryEnv makes every warmd process of the world see the recorded 8×H100 node.
func inventoryEnv(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../pkg/nvml/testdata/recorded-h100x8.json")
	if err != nil {
		t.Fatal(err)
	}
	return "WARMD_GPU_INVENTORY_FILE=" + p
}

// cacheWorld is a World set up for compile caches.
type cacheWorld struct {
	*World
	SKU string
}

// newCacheWorld builds a world whose warmd processes have a cacheable SKU, and learns that SKU from
// `warmd gpu -o json` (the binary computes it; the test does not).
func newCacheWorld(t *testing.T) *cacheWorld {
	t.Helper()
	w := NewWorld(t)
	w.Env = append(w.Env, inventoryEnv(t))
	r := w.Warmd("gpu", "-o", "json")
	var out struct {
		Inventory struct {
			SKU string `json:"sku"`
		} `json:"inventory"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || out.Inventory.SKU == "" {
		t.Fatalf("warmd gpu -o json: exit %d, %v\n%s", r.Code, err, r.Output())
	}
	return &cacheWorld{World: w, SKU: out.Inventory.SKU}
}

// Tree is the pod-written tree of one component: what a vLLM pod mounts read-write.
func (w *cacheWorld) Tree(comp string) string {
	return filepath.Join(w.DataDir, "compile-cache", w.SKU, comp)
}

// CacheConfig is a config with compile caches on: remote (may be empty) and extra compileCache keys.
func (w *cacheWorld) CacheConfig(b *Bucket, remote string, extra ...string) string {
	cc := []string{"quietPeriod: 1s"}
	if remote != "" {
		cc = append(cc, "remote: "+quoteYAML(remote))
	}
	sections := map[string]string{"compileCache": "{" + strings.Join(append(cc, extra...), ", ") + "}"}
	if b != nil {
		sections["s3"] = b.S3Section()
		w.Env = append(w.Env, b.Env...)
	}
	return w.Config(sections)
}

// Cache returns the daemon's compileCache section.
func (d *Daemon) Cache() cache.Status {
	d.w.T.Helper()
	cs, _, err := cache.Section.Decode(d.status().Sections)
	if err != nil {
		d.w.T.Fatal(err)
	}
	return cs
}

// WaitCache waits until the compileCache section satisfies ok.
func (d *Daemon) WaitCache(timeout time.Duration, what string, ok func(cache.Status) bool) cache.Status {
	d.w.T.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cs := d.Cache()
		if ok(cs) {
			return cs
		}
		if time.Now().After(deadline) {
			d.w.T.Fatalf("compile cache never %s: %+v\nlog:\n%s", what, cs, tail(d.Log(), 6000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// entry is one hand-made tar entry.
type entry struct {
	name, link string
	typ        byte
	data       []byte
	size       int64 // data nil: that many zero bytes, streamed (bombs)
	raw        []byte
}

// manifestEntry is a manifest's entry as warmd writes it.
type manifestEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	Target string `json:"target,omitempty"`
}

// manifest is a bundle manifest as warmd writes it.
type manifest struct {
	Schema    int                 `json:"schema"`
	SKU       string              `json:"sku"`
	Component string              `json:"component"`
	Node      string              `json:"node,omitempty"`
	Created   time.Time           `json:"created"`
	Versions  map[string][]string `json:"versions,omitempty"`
	Bytes     int64               `json:"bytes"`
	Entries   []manifestEntry     `json:"entries"`
	Extra     map[string]string   `json:"-"`
}

func (m manifest) json() []byte {
	b, _ := json.Marshal(m)
	if len(m.Extra) > 0 { // fields warmd does not write
		var obj map[string]any
		json.Unmarshal(b, &obj)
		for k, v := range m.Extra {
			obj[k] = v
		}
		b, _ = json.Marshal(obj)
	}
	return b
}

// hostileBundle is a tar.zst of entries plus a manifest: the honest one for the entries (every file's
// real size and sha256, links with their targets), changed by edit when given.
func hostileBundle(t *testing.T, sku, comp string, entries []entry, edit func(*manifest)) ([]byte, manifest) {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(enc)
	m := manifest{Schema: 1, SKU: sku, Component: comp, Node: "sec-seed", Created: time.Unix(1_800_000_000, 0).UTC()}
	for _, e := range entries {
		if e.raw != nil { // pre-formatted tar blocks (sparse entries)
			tw.Flush()
			enc.Write(e.raw)
			m.Entries = append(m.Entries, manifestEntry{Path: e.name, Type: "file", Size: e.size, SHA256: zeroSum(e.size, true), Mode: 0o644})
			m.Bytes += e.size
			continue
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Format: tar.FormatPAX}
		switch e.typ {
		case tar.TypeReg:
			h.Size = int64(len(e.data))
			if e.data == nil {
				h.Size = e.size
			}
		case tar.TypeDir:
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		switch e.typ {
		case tar.TypeReg:
			var sum string
			if e.data != nil {
				tw.Write(e.data)
				s := sha256.Sum256(e.data)
				sum = hex.EncodeToString(s[:])
			} else {
				zero := make([]byte, 1<<20)
				for left := e.size; left > 0; left -= int64(len(zero)) {
					tw.Write(zero[:min(left, int64(len(zero)))])
				}
				sum = zeroSum(e.size, false)
			}
			m.Entries = append(m.Entries, manifestEntry{Path: e.name, Type: "file", Size: h.Size, SHA256: sum, Mode: 0o644})
			m.Bytes += h.Size
		case tar.TypeSymlink:
			m.Entries = append(m.Entries, manifestEntry{Path: e.name, Type: "symlink", Target: e.link})
		case tar.TypeDir:
			m.Entries = append(m.Entries, manifestEntry{Path: strings.TrimSuffix(e.name, "/"), Type: "dir", Mode: 0o755})
		}
	}
	if edit != nil {
		edit(&m)
	}
	mj := m.json()
	tw.WriteHeader(&tar.Header{Name: ".warmd/manifest.json", Typeflag: tar.TypeReg, Size: int64(len(mj)), Mode: 0o644, Format: tar.FormatPAX})
	tw.Write(mj)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), m
}

// zeroSum is the sha256 of size zero bytes (with an 'x' as the last byte when x is set: the sparse
// fixtures' data).
func zeroSum(size int64, x bool) string {
	h := sha256.New()
	zero := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(zero)) {
		n := min(left, int64(len(zero)))
		if x && left == n {
			b := make([]byte, n)
			b[n-1] = 'x'
			h.Write(b)
			break
		}
		h.Write(zero[:n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func sum256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// indexEntry is an index entry as warmd writes it.
type indexEntry struct {
	SHA256    string    `json:"sha256"`
	Component string    `json:"component"`
	Size      int64     `json:"size"`
	Bytes     int64     `json:"bytes"`
	Files     int       `json:"files"`
	Node      string    `json:"node,omitempty"`
	Created   time.Time `json:"created"`
}

// publishBundles lays bundles out under prefix as a node publishes them: each bundle object, its
// manifest object (unless mf is nil) and one index generation listing them all.
func publishBundles(t *testing.T, b *Bucket, prefix, sku string, bundles ...published) {
	t.Helper()
	base := prefix + "/" + sku
	idx := struct {
		Schema     int          `json:"schema"`
		SKU        string       `json:"sku"`
		Generation int64        `json:"generation"`
		Updated    time.Time    `json:"updated"`
		Bundles    []indexEntry `json:"bundles"`
	}{Schema: 1, SKU: sku, Generation: 1, Updated: time.Now().UTC()}
	for _, p := range bundles {
		sha := sum256(p.data)
		b.Put(base+"/"+p.comp+"/"+sha+".tar.zst", p.data)
		if p.mf != nil {
			b.Put(base+"/"+p.comp+"/"+sha+".json", p.mf)
		}
		bytes := p.bytes
		if bytes == 0 {
			bytes = 1
		}
		idx.Bundles = append(idx.Bundles, indexEntry{SHA256: sha, Component: p.comp, Size: int64(len(p.data)), Bytes: bytes, Files: 1, Created: time.Now().UTC()})
	}
	body, _ := json.Marshal(idx)
	b.Put(base+"/index/000000000001.json", body)
	b.Put(base+"/index.json", body)
}

// published is one bundle for publishBundles.
type published struct {
	comp  string
	data  []byte
	mf    []byte // the manifest object; nil: none
	bytes int64  // the index's declared size
}

// seedExport makes a real bundle file the way an operator does: files written into a seed data dir's
// tree, then `warmd cache export`. It returns the exported files.
func (w *cacheWorld) seedExport(files map[string][]byte) []string {
	w.T.Helper()
	seed := filepath.Join(w.Work, "seed")
	for name, data := range files {
		p := filepath.Join(seed, "compile-cache", w.SKU, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			w.T.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			w.T.Fatal(err)
		}
	}
	out := filepath.Join(w.Work, "export")
	r := w.Warmd("cache", "export", "--data-dir", seed, "--sku", w.SKU, "--out", out)
	if r.Code != 0 {
		w.T.Fatalf("seed export: exit %d\n%s", r.Code, r.Output())
	}
	var got []string
	filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".tar.zst") {
			got = append(got, p)
		}
		return nil
	})
	if len(got) == 0 {
		w.T.Fatalf("seed export wrote nothing:\n%s", r.Output())
	}
	return got
}

// linksResolveInside fails the test for any symlink under dir that resolves outside dir.
func linksResolveInside(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		real, err := filepath.EvalSymlinks(p)
		if err == nil && real != dir && !strings.HasPrefix(real, dir+string(filepath.Separator)) {
			t.Errorf("link %s (restored by warmd) resolves outside the data dir, to %s", p, real)
		}
		return nil
	})
}

// peakUsage samples the bytes of regular files under dir every few milliseconds until stop is
// called, and returns the largest total it saw: what an extraction wrote before it was refused.
func peakUsage(dir string) (stop func() int64) {
	var mu sync.Mutex
	var peak int64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			var n int64
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					if fi, err := d.Info(); err == nil {
						n += fi.Size()
					}
				}
				return nil
			})
			mu.Lock()
			peak = max(peak, n)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() int64 {
		close(done)
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// bucketHolds reports whether any object under prefix holds secret in its (zstd-decoded) bytes.
func bucketHolds(t *testing.T, b *Bucket, prefix, secret string) []string {
	t.Helper()
	objs, err := b.store.List(context.Background(), b.Name, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var hits []string
	for _, o := range objs {
		var buf bytes.Buffer
		if _, err := b.store.Get(context.Background(), b.Name, o.Key, &buf); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		if dec, err := zstd.NewReader(bytes.NewReader(data)); err == nil {
			var plain bytes.Buffer
			if _, err := plain.ReadFrom(dec); err == nil {
				data = plain.Bytes()
			}
			dec.Close()
		}
		if bytes.Contains(data, []byte(secret)) {
			hits = append(hits, o.Key)
		}
	}
	return hits
}

// listKeys lists the keys under prefix.
func listKeys(t *testing.T, b *Bucket, prefix string) []string {
	t.Helper()
	objs, err := b.store.List(context.Background(), b.Name, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}
