package cache

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"warmd.io/warmd/pkg/cache/bundle"
	"warmd.io/warmd/pkg/cache/cachetest"
	"warmd.io/warmd/pkg/objstore"
)

const secret = "CANARY-SECRET-TOKEN-do-not-leak"

// hostileBundle packs files into a bundle whose manifest is m (entries filled from files unless m
// already lists some), as a writer other than warmd's would.
func hostileBundle(t *testing.T, files map[string][]byte, m bundle.Manifest) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	enc, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(enc)
	fill := m.Entries == nil
	for name, data := range files {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: int64(len(data)), Mode: 0o644})
		tw.Write(data)
		if fill {
			s := sha256.Sum256(data)
			m.Entries = append(m.Entries, bundle.Entry{Path: name, Type: bundle.TypeFile, Size: int64(len(data)), SHA256: hex.EncodeToString(s[:])})
			m.Bytes += int64(len(data))
		}
	}
	m.Schema = bundle.Schema
	mj, _ := json.Marshal(m)
	tw.WriteHeader(&tar.Header{Name: bundle.ManifestName, Typeflag: tar.TypeReg, Size: int64(len(mj)), Mode: 0o644})
	tw.Write(mj)
	tw.Close()
	enc.Close()
	s := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(s[:])
}

// publish puts a bundle (and, when mf is non-nil, its manifest object) under the SKU's prefix and
// lists it in the index.
func publish(t *testing.T, m *Manager, comp string, b []byte, sha string, mf any, entry IndexEntry) {
	t.Helper()
	ctx := context.Background()
	if err := objstore.PutBytes(ctx, m.share.Store, m.share.Bucket, m.share.BundleKey(comp, sha), b, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if mf != nil {
		putJSON(t, m.share.Store, m.share.Bucket, m.share.ManifestKey(comp, sha), mf)
	}
	entry.SHA256, entry.Component, entry.Size = sha, comp, int64(len(b))
	if _, err := m.share.Publish(ctx, []IndexEntry{entry}); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreRefusesWhatThePublishedManifestDoesNotDeclare: the manifest object next to a bundle
// bounds every entry before it is written; a bundle that holds more, other or different files than
// declared is refused whole, and nothing of it lands.
func TestRestoreRefusesWhatThePublishedManifestDoesNotDeclare(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s objstore.Store, bucket string) {
		m := newManager(t, skuA, s, bucket)
		small := []byte("declared")
		big := bytes.Repeat([]byte{0}, 8<<20)
		b, sha := hostileBundle(t, map[string][]byte{"K/k.cubin": big}, bundle.Manifest{SKU: skuA, Component: ComponentTriton})
		sum := sha256.Sum256(small)
		declared := bundle.Manifest{Schema: 1, SKU: skuA, Component: ComponentTriton, Bytes: int64(len(small)),
			Entries: []bundle.Entry{{Path: "K/k.cubin", Type: bundle.TypeFile, Size: int64(len(small)), SHA256: hex.EncodeToString(sum[:])}}}
		publish(t, m, ComponentTriton, b, sha, declared, IndexEntry{Bytes: int64(len(small))})
		res, err := m.Restore(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Restored) != 0 || len(res.Refused) != 1 || !strings.Contains(res.Refused[0], "published manifest") {
			t.Fatalf("restored %d, refused %v", len(res.Restored), res.Refused)
		}
		if f := cachetest.Sums(t, m.Layout().Root()); len(f) != 0 {
			t.Fatalf("refused bundle left %v", f)
		}
	})
}

// TestRestoreWithoutPublishedManifestIsBoundByTheIndex: with no manifest object, the index entry's
// declared size caps what the bundle may write.
func TestRestoreWithoutPublishedManifestIsBoundByTheIndex(t *testing.T) {
	t.Parallel()
	m := newManager(t, skuA, objstore.NewMemory(), "cache-mem")
	b, sha := hostileBundle(t, map[string][]byte{"K/k.cubin": bytes.Repeat([]byte{0}, 8<<20)}, bundle.Manifest{SKU: skuA, Component: ComponentTriton})
	publish(t, m, ComponentTriton, b, sha, nil, IndexEntry{Bytes: 4096})
	res, err := m.Restore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Restored) != 0 || len(res.Refused) != 1 || !strings.Contains(res.Refused[0], "exceeds size limit") {
		t.Fatalf("restored %d, refused %v", len(res.Restored), res.Refused)
	}
	if f := cachetest.Sums(t, m.Layout().Root()); len(f) != 0 {
		t.Fatalf("refused bundle left %v", f)
	}
}

// TestForgedManifestFieldsAreRefused: versions must be what the paths show and the node a node name;
// neither is text a bundle's writer may choose, since both are shown by `cache ls` and miss reasons.
func TestForgedManifestFieldsAreRefused(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{"torch_compile_cache/abcdef0123/rank_0_0/backbone/x.py": []byte("x")}
	for name, mf := range map[string]bundle.Manifest{
		"versions": {SKU: skuA, Component: ComponentVLLM, Versions: map[string][]string{"vllm-cache-hash": {secret}}},
		"node":     {SKU: skuA, Component: ComponentVLLM, Node: "Node " + secret, Versions: map[string][]string{"vllm-cache-hash": {"abcdef0123"}}},
	} {
		t.Run(name, func(t *testing.T) {
			m := newManager(t, skuA, nil, "")
			b, _ := hostileBundle(t, files, mf)
			file := filepath.Join(t.TempDir(), "b.tar.zst")
			os.WriteFile(file, b, 0o644)
			_, err := m.Import(context.Background(), file, ComponentVLLM)
			if err == nil || strings.Contains(err.Error(), secret) {
				t.Fatalf("import: %v (want a refusal that does not quote the field)", err)
			}
			if f := cachetest.Sums(t, m.Layout().Root()); len(f) != 0 {
				t.Fatalf("refused bundle left %v", f)
			}
		})
	}
}

// TestBucketTextIsNeverQuoted: an index or manifest object that is not what warmd writes is refused
// with an error naming the object, the field and the offset, never the object's text.
func TestBucketTextIsNeverQuoted(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"not json":          secret,
		"bad json":          `{"schema":1,"sku":"` + skuA + `","bundles":[` + secret + `]}`,
		"wrong type":        `{"schema":1,"sku":"` + skuA + `","generation":"` + secret + `"}`,
		"other sku":         `{"schema":1,"sku":"` + secret + ` x","bundles":[]}`,
		"malformed entry":   `{"schema":1,"sku":"` + skuA + `","bundles":[{"sha256":"` + secret + `","component":"triton"}]}`,
		"unknown component": `{"schema":1,"sku":"` + skuA + `","bundles":[{"sha256":"` + strings.Repeat("a", 64) + `","component":"` + secret + `"}]}`,
	} {
		t.Run("index/"+name, func(t *testing.T) {
			m := newManager(t, skuA, objstore.NewMemory(), "cache-mem")
			objstore.PutBytes(context.Background(), m.share.Store, m.share.Bucket, m.share.IndexKey(), []byte(body), objstore.PutOptions{})
			_, err := m.Restore(context.Background())
			if err == nil || strings.Contains(err.Error(), "CANARY") {
				t.Fatalf("restore: %v (want a refusal that does not quote the object)", err)
			}
			if st := m.Stats(); strings.Contains(st.LastError+strings.Join(st.Refused, ""), "CANARY") {
				t.Fatalf("status quotes the object: %+v", st)
			}
		})
	}
	for name, body := range map[string]string{
		"not json":      secret,
		"unknown field": `{"schema":1,"sku":"` + skuA + `","component":"triton","` + secret + `":1}`,
		"bad entry":     `{"schema":1,"sku":"` + skuA + `","component":"triton","entries":[{"path":"../` + secret + `","type":"file"}]}`,
	} {
		t.Run("manifest/"+name, func(t *testing.T) {
			m := newManager(t, skuA, objstore.NewMemory(), "cache-mem")
			b, sha := hostileBundle(t, map[string][]byte{"K/k.cubin": []byte("k")}, bundle.Manifest{SKU: skuA, Component: ComponentTriton})
			publish(t, m, ComponentTriton, b, sha, nil, IndexEntry{Bytes: 1})
			objstore.PutBytes(context.Background(), m.share.Store, m.share.Bucket, m.share.ManifestKey(ComponentTriton, sha), []byte(body), objstore.PutOptions{})
			res, err := m.Restore(context.Background())
			if err != nil || len(res.Refused) != 1 || strings.Contains(res.Refused[0], "CANARY") {
				t.Fatalf("restore: %v, refused %v (want one refusal that does not quote the object)", err, res.Refused)
			}
			if f := cachetest.Sums(t, m.Layout().Root()); len(f) != 0 {
				t.Fatalf("refused bundle left %v", f)
			}
		})
	}
}

// TestTamperedRecordIsNotTrusted: a record naming a path outside its tree (records are warmd's, but
// eviction deletes what they name) is skipped at load, and nothing outside is evicted.
func TestTamperedRecordIsNotTrusted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newManager(t, skuA, nil, "", func(o *Options) { o.DataDir = dir })
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("x"), 0o644)
	sum := sha256.Sum256([]byte("x"))
	rec := Record{SHA256: strings.Repeat("b", 64), Origin: OriginRestored, Manifest: bundle.Manifest{Schema: 1, SKU: skuA, Component: ComponentTriton, Bytes: 1,
		Entries: []bundle.Entry{{Path: "../../../victim", Type: bundle.TypeFile, Size: 1, SHA256: hex.EncodeToString(sum[:])}}}}
	b, _ := json.Marshal(rec)
	os.WriteFile(filepath.Join(m.Layout().Records(), rec.SHA256+".json"), b, 0o644)
	m2 := newManager(t, skuA, nil, "", func(o *Options) { o.DataDir = dir; o.Budget = 1; o.MinIdle = 1 })
	if n := len(m2.Records()); n != 0 {
		t.Fatalf("loaded %d records, want the tampered one skipped", n)
	}
	if _, err := m2.Evict(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("eviction removed a file outside the tree: %v", err)
	}
}
