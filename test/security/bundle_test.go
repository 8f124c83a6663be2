package security

// Classes 3, 4 and 5 for compile-cache bundles, which come from a shared bucket (the daemon's restore,
// `warmd cache pull`) or an operator's copy (`warmd cache import`). Size limits count what is
// materialised: a sparse entry or a zstd bomb is refused before it fills the disk (3). Every entry's
// sha256 is computed on import and restore and checked against the manifest (4). A symlink chain
// whose text stays inside but whose resolution leaves the tree is refused. What a bundle, its
// manifest or the index says is never quoted into logs, status or the CLI's output (5).

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/cache"
)

// sparse tar entries, made by hand (archive/tar reads them but cannot write them): the old GNU type
// 'S' and GNU's PAX formats 0.0, 0.1 and 1.0, each one byte of data ('x') at the end of size bytes.
func sparseEntry(kind, name string, size int64) []byte {
	hdr := func(name string, typ byte, n int64, gnu bool) []byte {
		var b [512]byte
		copy(b[0:], name)
		copy(b[100:], "0000644\x00")
		copy(b[108:], "0000000\x00")
		copy(b[116:], "0000000\x00")
		copy(b[124:], fmt.Sprintf("%011o\x00", n))
		copy(b[136:], fmt.Sprintf("%011o\x00", 0))
		b[156] = typ
		copy(b[257:], "ustar\x0000")
		if gnu {
			copy(b[257:], "ustar  \x00")
			copy(b[386:], fmt.Sprintf("%011o\x00", size-1)) // sparse[0].offset
			copy(b[398:], fmt.Sprintf("%011o\x00", 1))      // sparse[0].numbytes
			copy(b[483:], fmt.Sprintf("%011o\x00", size))   // realsize
		}
		copy(b[148:], "        ")
		sum := 0
		for _, c := range b {
			sum += int(c)
		}
		copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
		return b[:]
	}
	pad := func(b []byte) []byte { return append(b, make([]byte, (512-len(b)%512)%512)...) }
	pax := func(kv ...string) []byte {
		var data []byte
		for i := 0; i < len(kv); i += 2 {
			rec := " " + kv[i] + "=" + kv[i+1] + "\n"
			n := len(rec) + len(fmt.Sprint(len(rec)))
			if len(fmt.Sprint(n)) > len(fmt.Sprint(len(rec))) {
				n++
			}
			data = append(data, fmt.Sprintf("%d%s", n, rec)...)
		}
		return append(hdr("PaxHeaders/x", tar.TypeXHeader, int64(len(data)), false), pad(data)...)
	}
	x := pad([]byte("x"))
	switch kind {
	case "gnu":
		return append(hdr(name, tar.TypeGNUSparse, 1, true), x...)
	case "pax-0.0":
		out := pax("GNU.sparse.size", fmt.Sprint(size), "GNU.sparse.numblocks", "1", "GNU.sparse.offset", fmt.Sprint(size-1), "GNU.sparse.numbytes", "1")
		return append(append(out, hdr(name, tar.TypeReg, 1, false)...), x...)
	case "pax-0.1":
		out := pax("GNU.sparse.size", fmt.Sprint(size), "GNU.sparse.numblocks", "1", "GNU.sparse.map", fmt.Sprintf("%d,1", size-1))
		return append(append(out, hdr(name, tar.TypeReg, 1, false)...), x...)
	}
	out := pax("GNU.sparse.major", "1", "GNU.sparse.minor", "0", "GNU.sparse.name", name, "GNU.sparse.realsize", fmt.Sprint(size))
	data := append(pad([]byte(fmt.Sprintf("1\n%d\n1\n", size-1))), x...)
	return append(append(out, hdr("GNUSparseFile.0/"+name, tar.TypeReg, 513, false)...), data...)
}

// restoreAndImport runs one set of hostile bundles through the daemon's restore (from versitygw) and
// through `warmd cache import` (the same bytes as files) and hands each outcome to check: the
// daemon's status and log, or the CLI's result. Each path has a world of its own.
func restoreAndImport(t *testing.T, bundles func(w *cacheWorld) []published,
	check func(t *testing.T, w *cacheWorld, peak int64, refused []string, output string)) {
	t.Run("daemon restore", func(t *testing.T) {
		w := newCacheWorld(t)
		b := VersityBucket(t)
		publishBundles(t, b, "fleet", w.SKU, bundles(w)...)
		stop := peakUsage(w.DataDir)
		d := w.StartDaemon(w.CacheConfig(b, b.URL("fleet")))
		cs := d.WaitCache(2*time.Minute, "restored", func(cs cache.Status) bool { return cs.LastRestore != nil || cs.LastError != "" })
		peak := stop()
		seen := d.Log() + string(d.StatusJSON())
		d.Stop()
		check(t, w, peak, cs.Refused, seen)
		w.Check()
	})
	t.Run("cli import", func(t *testing.T) {
		w := newCacheWorld(t)
		var files []string
		for i, p := range bundles(w) {
			f := filepath.Join(w.Work, "in", p.comp, fmt.Sprintf("b%d.tar.zst", i))
			must(t, os.MkdirAll(filepath.Dir(f), 0o755))
			must(t, os.WriteFile(f, p.data, 0o644))
			files = append(files, f)
		}
		must(t, os.MkdirAll(w.Tree("triton"), 0o755))
		stop := peakUsage(w.DataDir)
		r := w.Warmd(append([]string{"cache", "import", "--data-dir", w.DataDir, "--sku", w.SKU}, files...)...)
		peak := stop()
		var refused []string // one line per refused file, naming it
		for _, l := range strings.Split(r.Stderr, "\n") {
			if strings.Contains(l, ".tar.zst") {
				refused = append(refused, l)
			}
		}
		check(t, w, peak, refused, r.Output())
		w.Check()
	})
}

// treeFiles lists the regular files and links under the SKU tree.
func treeFiles(w *cacheWorld) []string {
	var out []string
	filepath.Walk(filepath.Join(w.DataDir, "compile-cache", w.SKU), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestBundleSparseEntriesAreRefused: four bundles of a few hundred bytes whose one entry expands to
// 256 MiB (each sparse format archive/tar reads), with manifests that agree. None may be written.
func TestBundleSparseEntriesAreRefused(t *testing.T) {
	const size = 256 << 20
	restoreAndImport(t, func(w *cacheWorld) []published {
		var out []published
		for _, kind := range []string{"gnu", "pax-0.0", "pax-0.1", "pax-1.0"} {
			data, m := hostileBundle(t, w.SKU, "triton", []entry{{name: "bomb.so", raw: sparseEntry(kind, "bomb.so", size), size: size}}, nil)
			if len(data) > 4096 {
				t.Fatalf("%s bundle is %d bytes", kind, len(data))
			}
			out = append(out, published{comp: "triton", data: data, mf: m.json(), bytes: m.Bytes})
		}
		return out
	}, func(t *testing.T, w *cacheWorld, peak int64, refused []string, output string) {
		if len(refused) < 4 || !strings.Contains(output, "sparse") {
			t.Errorf("sparse bundles not all refused as sparse: %q", refused)
		}
		if peak > 1<<20 || len(treeFiles(w)) > 0 {
			t.Errorf("sparse entries materialised: peak %d bytes under the data dir, tree %v", peak, treeFiles(w))
		}
	})
}

// TestBundleBombIsBoundedByWhatWasDeclared: a bundle of a few KiB that decompresses into one 1 GiB
// file, published as (and, for the import, claiming in its own manifest) a 1 MiB file. The extraction
// must stop at the declared size, not write the gigabyte and then notice.
func TestBundleBombIsBoundedByWhatWasDeclared(t *testing.T) {
	const real, declared = 1 << 30, 1 << 20
	restoreAndImport(t, func(w *cacheWorld) []published {
		data, m := hostileBundle(t, w.SKU, "triton", []entry{{name: "KEY/bomb.so", typ: tar.TypeReg, size: real}},
			func(m *manifest) {
				m.Entries[0].Size, m.Entries[0].SHA256, m.Bytes = declared, zeroSum(declared, false), declared
			})
		return []published{{comp: "triton", data: data, mf: m.json(), bytes: declared}}
	}, func(t *testing.T, w *cacheWorld, peak int64, refused []string, output string) {
		if len(refused) != 1 {
			t.Errorf("bomb not refused: %q", refused)
		}
		if peak > 2*declared {
			t.Errorf("the bomb wrote %d bytes under the data dir before it was refused; %d were declared", peak, declared)
		}
	})
}

// TestBundleEntryDigestsAreVerified: a bundle whose manifest gives a file the digest of other
// content (the bundle's own name is its real digest, so that check passes). It must be refused.
func TestBundleEntryDigestsAreVerified(t *testing.T) {
	restoreAndImport(t, func(w *cacheWorld) []published {
		data, m := hostileBundle(t, w.SKU, "triton", []entry{{name: "KEY/k.cubin", typ: tar.TypeReg, data: []byte("not the kernel the manifest names")}},
			func(m *manifest) { m.Entries[0].SHA256 = sum256([]byte("the genuine kernel")) })
		return []published{{comp: "triton", data: data, mf: m.json(), bytes: m.Bytes}}
	}, func(t *testing.T, w *cacheWorld, peak int64, refused []string, output string) {
		if len(refused) != 1 || len(treeFiles(w)) > 0 {
			t.Errorf("a bundle whose entry does not match its manifest digest was restored: refused %q, tree %v", refused, treeFiles(w))
		}
	})
}

// TestBundleLinkChainsAreRefused: each link's text stays inside the tree ("s" -> "." and
// "esc" -> "s/s/s/s/../../../../canary"), but resolved, esc climbs from the component dir through
// compile-cache/<sku>/, compile-cache/ and the data dir to the canary beside it.
func TestBundleLinkChainsAreRefused(t *testing.T) {
	restoreAndImport(t, func(w *cacheWorld) []published {
		data, m := hostileBundle(t, w.SKU, "triton", []entry{
			{name: "s", typ: tar.TypeSymlink, link: "."},
			{name: "esc", typ: tar.TypeSymlink, link: "s/s/s/s/../../../../canary"},
		}, nil)
		return []published{{comp: "triton", data: data, mf: m.json(), bytes: 1}}
	}, func(t *testing.T, w *cacheWorld, peak int64, refused []string, output string) {
		if len(refused) != 1 {
			t.Errorf("a bundle whose links lead out of the tree was accepted: %q", refused)
		}
		linksResolveInside(t, w.DataDir)
	})
}

// TestBundleTextIsNeverQuoted: a manifest field and an index entry carry text of the bucket's
// choosing; refusals name the field and the entry, never repeat the text.
func TestBundleTextIsNeverQuoted(t *testing.T) {
	const marker = "BUCKET-TEXT-7f3a9c"
	restoreAndImport(t, func(w *cacheWorld) []published {
		data, m := hostileBundle(t, w.SKU, "triton", []entry{{name: "KEY/k.cubin", typ: tar.TypeReg, data: []byte("k")}},
			func(m *manifest) { m.Extra = map[string]string{marker: "x"} })
		return []published{{comp: "triton", data: data, mf: m.json(), bytes: m.Bytes}}
	}, func(t *testing.T, w *cacheWorld, peak int64, refused []string, output string) {
		if len(refused) != 1 {
			t.Errorf("a manifest with an unknown field was accepted: %q", refused)
		}
		NoLeak(t, marker, map[string]string{"output, log and status": output})
	})
	t.Run("index", func(t *testing.T) {
		w := newCacheWorld(t)
		b := VersityBucket(t)
		body := fmt.Sprintf(`{"schema":1,"sku":%q,"generation":1,"bundles":[{"sha256":%q,"component":"triton"}]}`, w.SKU, marker)
		b.Put("fleet/"+w.SKU+"/index.json", []byte(body))
		d := w.StartDaemon(w.CacheConfig(b, b.URL("fleet")))
		cs := d.WaitCache(time.Minute, "failed its restore", func(cs cache.Status) bool { return cs.LastError != "" })
		d.Stop()
		NoLeak(t, marker, map[string]string{"daemon log": d.Log(), "status": cs.LastError})
		r := w.Warmd("cache", "pull", "--config", w.CacheConfig(b, b.URL("fleet")), "--sku", w.SKU)
		if r.Code == 0 {
			t.Errorf("pull of a malformed index succeeded:\n%s", r.Output())
		}
		NoLeak(t, marker, map[string]string{"pull output": r.Output()})
		w.Check()
	})
}

// TestBundleLinksRestoreAndLeftOutEntriesAreReported (issue 25 item 6): a bundle's symlink entry
// (a kernel's lib.so → lib.so.1, inside its dir) is restored as the link, not dropped; an entry the
// tree already holds with other content (a pod wrote it first) is left out, the tree's file kept, and
// the restore's log and the import's output say how many were left out and name it, cut. Before, a
// symlink entry was dropped without a word while the import reported success.
func TestBundleLinksRestoreAndLeftOutEntriesAreReported(t *testing.T) {
	restoreAndImport(t, func(w *cacheWorld) []published {
		// What the pod wrote before the bundle arrived.
		must(t, os.MkdirAll(filepath.Join(w.Tree("triton"), "KEY2"), 0o755))
		must(t, os.WriteFile(filepath.Join(w.Tree("triton"), "KEY2", "k.cubin"), []byte("the pod's own"), 0o644))
		data, m := hostileBundle(t, w.SKU, "triton", []entry{
			{name: "KEY1/lib.so.1", typ: tar.TypeReg, data: []byte("kernel library")},
			{name: "KEY1/lib.so", typ: tar.TypeSymlink, link: "lib.so.1"},
			{name: "KEY2/k.cubin", typ: tar.TypeReg, data: []byte("the bundle's")},
		}, nil)
		return []published{{comp: "triton", data: data, mf: m.json(), bytes: m.Bytes}}
	}, func(t *testing.T, w *cacheWorld, peak int64, refused []string, output string) {
		if len(refused) != 0 {
			t.Fatalf("the bundle was refused: %q\n%s", refused, tail(output, 3000))
		}
		link := filepath.Join(w.Tree("triton"), "KEY1", "lib.so")
		if target, err := os.Readlink(link); err != nil || target != "lib.so.1" {
			t.Errorf("the bundle's symlink entry: %q %v, want a link to lib.so.1", target, err)
		}
		if b, err := os.ReadFile(link); err != nil || string(b) != "kernel library" {
			t.Errorf("reading through the restored link: %q %v", b, err)
		}
		if b, _ := os.ReadFile(filepath.Join(w.Tree("triton"), "KEY2", "k.cubin")); string(b) != "the pod's own" {
			t.Errorf("the tree's own KEY2/k.cubin was replaced: %q", b)
		}
		said := strings.Contains(output, "1 entries left out") || strings.Contains(output, "leftOut=1") ||
			strings.Contains(output, `"leftOut":1`)
		if !said || !strings.Contains(output, "KEY2/k.cubin") {
			t.Errorf("the entry left out is not reported with its count and name:\n%s", tail(output, 3000))
		}
	})
}
