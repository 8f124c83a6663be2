package bundle

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestExtractWhileAPodSwapsDirs: while bundles extract into a tree, a "pod" keeps swapping one of the
// bundle's dirs (and the tree's own subdir the bundle writes below) for a link to a dir outside.
// Extractions may fail; none may write outside, and none may leave temp files.
func TestExtractWhileAPodSwapsDirs(t *testing.T) {
	src := t.TempDir()
	files := map[string][]byte{}
	for i := range 30 {
		files[fmt.Sprintf("d%d/k%02d.cubin", i%3, i)] = bytes.Repeat([]byte{byte(i)}, 64<<10)
	}
	names := writeTree(t, src, files)
	var buf bytes.Buffer
	if _, err := Write(&buf, root(t, src), paths(t, names), Manifest{SKU: "sku-a", Component: "triton"}); err != nil {
		t.Fatal(err)
	}
	dest, outside := sandbox(t)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, d := range []string{"d1", "d2"} {
		dir, aside := filepath.Join(dest, d), filepath.Join(filepath.Dir(dest), d+".aside")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				os.MkdirAll(dir, 0o755)
				if os.Rename(dir, aside) == nil {
					os.Symlink(outside, dir)
					time.Sleep(time.Duration(i%4) * 100 * time.Microsecond)
					os.Remove(dir)
					os.Rename(aside, dir)
				}
				time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
			}
		}()
	}
	r := root(t, dest)
	ok, failed := 0, 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		for _, p := range listFiles(t, dest) {
			os.Remove(filepath.Join(dest, p)) // every round writes again
		}
		if _, err := Extract(bytes.NewReader(buf.Bytes()), r, Options{}); err != nil {
			failed++
		} else {
			ok++
		}
		if o := listFiles(t, outside); len(o) != 0 {
			t.Fatalf("extraction wrote outside through a swapped dir: %v", o)
		}
	}
	close(done)
	wg.Wait()
	for _, p := range listFiles(t, dest) {
		if IsTemp(p) {
			t.Fatalf("temp file left: %s", p)
		}
	}
	t.Logf("%d extractions completed, %d refused under the swaps", ok, failed)
}
