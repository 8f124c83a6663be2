package security

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCaptureOfFilesThatGrow: a pod appends to its kernel files in bursts (quiet for 1.5 s, longer
// than the 1 s quiet period, then writing for 0.4 s), so captures start on files that look
// finished and some find them growing while they read. Whatever `warmd cache push` uploads must
// restore on another node (every bundle verifies) into files that are each a state the pod wrote: a
// prefix of what it wrote in the end, never a torn mix.
func TestCaptureOfFilesThatGrow(t *testing.T) {
	w := newCacheWorld(t)
	b := VersityBucket(t)
	cfg := w.CacheConfig(b, b.URL("fleet"))
	const files = 4
	line := func(f, i int) []byte {
		return []byte(fmt.Sprintf("kernel %d line %08d %s\n", f, i, strings.Repeat("x", 200)))
	}
	paths := make([]string, files)
	for f := range paths {
		paths[f] = filepath.Join(w.Tree("triton"), fmt.Sprintf("GROW%02d", f), "k.cubin")
		must(t, os.MkdirAll(filepath.Dir(paths[f]), 0o755))
		must(t, os.WriteFile(paths[f], line(f, 0), 0o644))
	}
	old := time.Now().Add(-time.Minute) // the first capture may take them at once
	for _, p := range paths {
		must(t, os.Chtimes(p, old, old))
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		n := 1
		for {
			select {
			case <-done:
				return
			case <-time.After(1500 * time.Millisecond):
			}
			for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); n++ {
				for f, p := range paths {
					fh, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
					if err != nil {
						continue
					}
					fh.Write(bytes.Repeat(line(f, n), 64))
					fh.Close()
				}
			}
		}
	})
	rounds, failed := 0, 0
	for deadline := time.Now().Add(12 * time.Second); time.Now().Before(deadline); rounds++ {
		r := w.Warmd("cache", "push", "--config", cfg, "--sku", w.SKU)
		if r.Code != 0 {
			if failed++; failed == 1 {
				t.Logf("a push under the writes: exit %d: %s", r.Code, firstLine(r.Output()))
			}
		}
	}
	close(done)
	wg.Wait()
	if keys := listKeys(t, b, "fleet/"+w.SKU+"/triton/"); len(keys) == 0 {
		t.Fatalf("%d pushes uploaded nothing: the case tests nothing", rounds)
	}

	// Another node restores what was uploaded.
	w2 := newCacheWorld(t)
	r := w2.Warmd("cache", "pull", "--config", w2.CacheConfig(b, b.URL("fleet")), "--sku", w2.SKU)
	if r.Code != 0 {
		t.Fatalf("restore of what the pushes uploaded: exit %d\n%s", r.Code, tail(r.Output(), 3000))
	}
	restored := 0
	for f, p := range paths {
		final, err := os.ReadFile(p)
		must(t, err)
		got, err := os.ReadFile(filepath.Join(w2.Tree("triton"), fmt.Sprintf("GROW%02d", f), "k.cubin"))
		if err != nil {
			continue // never captured whole: fine
		}
		restored++
		if !bytes.HasPrefix(final, got) {
			t.Errorf("GROW%02d: restored %d bytes that are no state the pod wrote (its file is %d bytes)", f, len(got), len(final))
		}
	}
	t.Logf("%d pushes (%d failed), %d of %d growing files restored", rounds, failed, restored, files)
	if restored == 0 {
		t.Error("no growing file was ever captured: the case tests nothing")
	}
	w.Check()
	w2.Check()
}
