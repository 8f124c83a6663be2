package security

// Class 2: a vLLM pod mounts compile-cache/<sku>/ read-write. It can replace any dir (or file) of
// that tree with a link, or rename dirs, at any moment, including between warmd's look and its
// write. Eviction must never delete through such a link, restores and imports must never write
// through one, and capture must never read (and upload) what one points to. The test plays the pod:
// it edits the tree between warmd's steps and, for the races, swaps dirs for links in a loop while
// warmd works. Class 9: a `warmd cache import` beside the running daemon is done by the daemon and
// recorded as imported, never captured again as the node's own and uploaded twice.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"warmd.io/warmd/pkg/cache"
)

// swapper plays a pod that keeps replacing dir with a link to target and back, until stop: the real
// dir waits in aside (where capture does not look) while the link stands, each state for 1-8 ms.
func swapper(t *testing.T, dir, aside, target string) (stop func() int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(aside), 0o755); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	swaps := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if os.Rename(dir, aside) == nil {
				if os.Symlink(target, dir) == nil {
					swaps++
					time.Sleep(time.Duration(1+i%8) * time.Millisecond)
					os.Remove(dir)
				}
				os.Rename(aside, dir)
			}
			time.Sleep(time.Duration(1+(i*3)%8) * time.Millisecond)
		}
	}()
	return func() int {
		close(done)
		wg.Wait()
		if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			os.Remove(dir)
		}
		os.Rename(aside, dir)
		return swaps
	}
}

// TestCacheEvictionNeverDeletesThroughALink: a pod's files are captured, the pod then replaces their
// dir with a link to a host dir holding files of the same names and sizes (the canary), and the
// daemon evicts the bundle. Nothing out there may be deleted.
func TestCacheEvictionNeverDeletesThroughALink(t *testing.T) {
	w := newCacheWorld(t)
	secret, _ := os.ReadFile(filepath.Join(w.Canary.Path, "secret.txt"))
	passwd, _ := os.ReadFile(filepath.Join(w.Canary.Path, "etc/passwd"))
	hashDir := filepath.Join(w.Tree("vllm"), "torch_compile_cache", "0123456789")
	must(t, os.MkdirAll(filepath.Join(hashDir, "etc"), 0o755))
	// Same names and sizes as the canary's files: what eviction checks before it deletes.
	must(t, os.WriteFile(filepath.Join(hashDir, "secret.txt"), make([]byte, len(secret)), 0o644))
	must(t, os.WriteFile(filepath.Join(hashDir, "etc/passwd"), make([]byte, len(passwd)), 0o644))
	must(t, os.WriteFile(filepath.Join(hashDir, "filler.bin"), make([]byte, 2<<20), 0o644)) // over the budget

	cfg := w.CacheConfig(nil, "", "budget: 1Mi")
	d := w.StartDaemon(cfg)
	d.WaitCache(30*time.Second, "captured the pod's files", func(cs cache.Status) bool { return cs.Captured > 0 })
	d.Stop()
	// An hour passes: bundles idle that long may be evicted (the manager keeps use times in its
	// records; moving them back is what the clock would do).
	ageRecords(t, filepath.Join(w.DataDir, "compile-cache", ".bundles", w.SKU), 2*time.Hour)

	// The pod swaps its dir for a link to the host's dir.
	must(t, os.Rename(hashDir, hashDir+".old"))
	must(t, os.Symlink(w.Canary.Path, hashDir))

	d = w.StartDaemon(cfg)
	d.WaitCache(30*time.Second, "evicted the idle bundle", func(cs cache.Status) bool { return cs.Evicted > 0 })
	d.Stop()
	w.Check()
}

// ageRecords moves every record's use and add times back by d.
func ageRecords(t *testing.T, dir string, d time.Duration) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		must(t, err)
		var rec map[string]any
		must(t, json.Unmarshal(b, &rec))
		old := time.Now().Add(-d).UTC().Format(time.RFC3339Nano)
		rec["lastUsed"], rec["added"] = old, old
		b, _ = json.Marshal(rec)
		must(t, os.WriteFile(p, b, 0o644))
		n++
	}
	if n == 0 {
		t.Fatalf("no bundle records under %s", dir)
	}
}

// seedBucket has node "seed" push a real bundle (one Triton kernel) to prefix: `warmd cache push`.
func (w *cacheWorld) seedBucket(b *Bucket, prefix string, files map[string][]byte) {
	w.T.Helper()
	seed := filepath.Join(w.Work, "seed-"+strings.ReplaceAll(prefix, "/", "-"))
	for name, data := range files {
		p := filepath.Join(seed, "compile-cache", w.SKU, filepath.FromSlash(name))
		must(w.T, os.MkdirAll(filepath.Dir(p), 0o755))
		must(w.T, os.WriteFile(p, data, 0o644))
	}
	cfg := w.Config(map[string]string{"s3": b.S3Section(), "dataDir": quoteYAML(seed),
		"compileCache": fmt.Sprintf("{remote: %s}", quoteYAML(b.URL(prefix)))})
	env := w.Env
	w.Env = append(w.Env, b.Env...)
	defer func() { w.Env = env }()
	if r := w.Warmd("cache", "push", "--config", cfg, "--sku", w.SKU); r.Code != 0 {
		w.T.Fatalf("seed push: exit %d\n%s", r.Code, r.Output())
	}
}

var kernel = map[string][]byte{"triton/KERNELKEY0001/k.cubin": []byte(strings.Repeat("cubin", 2000))}

// TestCacheRestoreNeverWritesThroughAComponentLink: the pod replaced its whole triton dir with a
// link to a host dir. A restore (the daemon's at start, and `warmd cache pull`) must not follow it.
func TestCacheRestoreNeverWritesThroughAComponentLink(t *testing.T) {
	for _, via := range []string{"daemon", "cli"} {
		t.Run(via, func(t *testing.T) {
			w := newCacheWorld(t)
			b := VersityBucket(t)
			w.seedBucket(b, "fleet", kernel)
			must(t, os.MkdirAll(filepath.Dir(w.Tree("triton")), 0o755))
			must(t, os.Symlink(w.Canary.Path, w.Tree("triton")))
			cfg := w.CacheConfig(b, b.URL("fleet"))
			if via == "daemon" {
				d := w.StartDaemon(cfg)
				d.WaitCache(30*time.Second, "restored", func(cs cache.Status) bool { return cs.LastRestore != nil })
				d.Stop()
			} else {
				r := w.Warmd("cache", "pull", "--config", cfg, "--sku", w.SKU)
				t.Logf("pull: exit %d\n%s", r.Code, r.Output())
			}
			w.Check()
			if fi, err := os.Lstat(w.Tree("triton")); err != nil || !fi.IsDir() {
				t.Errorf("the component is not a dir again after the restore (%v)", err)
			}
		})
	}
}

// TestCacheImportNeverWritesThroughAComponentLink: the same for `warmd cache import` of an exported
// bundle, without and with a running daemon (which then does the import).
func TestCacheImportNeverWritesThroughAComponentLink(t *testing.T) {
	for _, via := range []string{"cli", "daemon"} {
		t.Run(via, func(t *testing.T) {
			w := newCacheWorld(t)
			files := w.seedExport(kernel)
			if via == "daemon" {
				d := w.StartDaemon(w.CacheConfig(nil, ""))
				d.WaitCache(30*time.Second, "ready", func(cs cache.Status) bool { return cs.State == cache.StateReady })
			}
			os.RemoveAll(w.Tree("triton"))
			must(t, os.MkdirAll(filepath.Dir(w.Tree("triton")), 0o755))
			must(t, os.Symlink(w.Canary.Path, w.Tree("triton")))
			r := w.Warmd(append([]string{"cache", "import", "--data-dir", w.DataDir, "--sku", w.SKU}, files...)...)
			// The import makes the component a dir again and imports into it (as a restore does,
			// above): a refusal would also leave the canary alone, so it must succeed.
			if r.Code != 0 {
				t.Errorf("import over a component link: exit %d, want 0\n%s", r.Code, r.Output())
			}
			w.Check()
			if fi, err := os.Lstat(w.Tree("triton")); err != nil || !fi.IsDir() {
				t.Errorf("the component is not a dir again after the import (%v)", err)
			}
		})
	}
}

// TestCacheRestoreAndImportRaceASwappingPod: while warmd restores and imports, the pod keeps
// swapping the component dir (and, in turn, a kernel dir inside it) for a link to the host's dir.
// Whatever warmd managed to restore, nothing lands out there.
func TestCacheRestoreAndImportRaceASwappingPod(t *testing.T) {
	big := map[string][]byte{}
	for i := range 40 {
		big[fmt.Sprintf("triton/KEY%04d/k.cubin", i)] = []byte(strings.Repeat(fmt.Sprintf("kernel %d ", i), 20000))
	}
	w := newCacheWorld(t)
	b := VersityBucket(t)
	w.seedBucket(b, "fleet", big)
	files := w.seedExport(big)
	cfg := w.CacheConfig(b, b.URL("fleet"))
	must(t, os.MkdirAll(w.Tree("triton"), 0o755))
	for _, sw := range [][2]string{
		{w.Tree("triton"), filepath.Join(w.DataDir, "compile-cache", w.SKU, "triton.pod-aside")},
		{filepath.Join(w.Tree("triton"), "KEY0007"), filepath.Join(w.Tree("triton"), "tmp", "KEY0007")},
	} {
		target := sw[0]
		must(t, os.MkdirAll(target, 0o755))
		stop := swapper(t, target, sw[1], w.Canary.Path)
		outcomes := map[string]int{}
		for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); {
			// Fresh each round, so every round writes again.
			os.RemoveAll(filepath.Join(w.DataDir, "compile-cache", ".bundles"))
			for _, r := range []Result{
				w.Warmd("cache", "pull", "--config", cfg, "--sku", w.SKU),
				w.Warmd(append([]string{"cache", "import", "--data-dir", w.DataDir, "--sku", w.SKU}, files...)...),
			} {
				k := fmt.Sprintf("exit %d", r.Code)
				if outcomes[k]++; outcomes[k] == 1 && r.Code != 0 {
					t.Logf("first %s: %s", k, firstLine(r.Output())) // refusals under the swaps are fine; writes outside are not
				}
			}
		}
		t.Logf("%s: %d swaps; outcomes %v", target, stop(), outcomes)
		w.Check()
	}
}

// TestCaptureNeverPacksWhatALinkPointsTo: the pod writes a kernel dir, and while `warmd cache push`
// captures it, keeps swapping the dir for a link to the host's dir, which holds a secret under the
// same file name. The bucket must never receive the secret.
func TestCaptureNeverPacksWhatALinkPointsTo(t *testing.T) {
	w := newCacheWorld(t)
	b := VersityBucket(t)
	cfg := w.CacheConfig(b, b.URL("fleet"))
	secret, _ := os.ReadFile(filepath.Join(w.Canary.Path, "secret.txt"))
	deadline := time.Now().Add(10 * time.Second)
	rounds := 0
	for i := 0; time.Now().Before(deadline); i++ {
		var stops []func() int
		for j := range 4 { // four kernel dirs per capture, each swapped on its own
			name := fmt.Sprintf("POD%04d-%d", i, j)
			dir := filepath.Join(w.Tree("triton"), name)
			must(t, os.MkdirAll(dir, 0o755))
			must(t, os.WriteFile(filepath.Join(dir, "secret.txt"), []byte(strings.Repeat("p", len(secret))), 0o644))
			// Aside under tmp/, which capture never looks into (Triton's own temp dirs).
			stops = append(stops, swapper(t, dir, filepath.Join(w.Tree("triton"), "tmp", name), w.Canary.Path))
		}
		w.Warmd("cache", "push", "--config", cfg, "--sku", w.SKU)
		for _, stop := range stops {
			stop()
		}
		rounds++
	}
	t.Logf("%d captures", rounds)
	if hits := bucketHolds(t, b, "fleet/", "CANARY-SECRET-TOKEN"); len(hits) > 0 {
		t.Errorf("capture packed a file a link pointed to; the bucket now holds the host's secret in %v", hits)
	}
	w.Check()
}

// TestCacheImportBesideTheDaemonIsNotCapturedAgain: with the daemon running (and sharing to a
// bucket), `warmd cache import` goes through the daemon: the bundle is recorded once, as imported,
// and never captured again as this node's own and uploaded.
func TestCacheImportBesideTheDaemonIsNotCapturedAgain(t *testing.T) {
	w := newCacheWorld(t)
	b := VersityBucket(t)
	files := w.seedExport(kernel)
	d := w.StartDaemon(w.CacheConfig(b, b.URL("fleet")))
	d.WaitCache(30*time.Second, "ready", func(cs cache.Status) bool { return cs.State == cache.StateReady })
	r := w.Warmd(append([]string{"cache", "import", "--data-dir", w.DataDir, "--sku", w.SKU}, files...)...)
	if r.Code != 0 {
		t.Fatalf("import beside the daemon: exit %d\n%s", r.Code, r.Output())
	}
	// Long enough for the daemon's quiet period (1 s), its tick and an upload.
	time.Sleep(6 * time.Second)
	if keys := listKeys(t, b, "fleet/"+w.SKU+"/triton/"); len(keys) > 0 {
		t.Errorf("the imported bundle was captured again and uploaded as this node's own: %v\n%s", keys, tail(d.Log(), 4000))
	}
	cs := d.Cache()
	if cs.Captured != 0 || cs.BundlesLocal != 1 {
		t.Errorf("daemon: captured %d, %d local bundles; want 0 captured and the one import", cs.Captured, cs.BundlesLocal)
	}
	d.Stop()
	ls := w.Warmd("cache", "ls", "--data-dir", w.DataDir, "--sku", w.SKU, "-o", "json")
	var recs []cache.Record
	if err := json.Unmarshal([]byte(ls.Stdout), &recs); err != nil || len(recs) != 1 || recs[0].Origin != cache.OriginImported {
		t.Errorf("records after import beside the daemon: %v %+v\n%s", err, recs, ls.Output())
	}
	w.Check()
}

// firstLine is s up to its first newline, cut to 160 bytes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}
