package bundle

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const killChildEnv = "WARMD_BUNDLE_KILL_CHILD"

// TestKillDuringExtract re-executes this test binary as a child that extracts a bundle, kills it
// with SIGKILL at different moments, and checks that every file under its final name is complete:
// a kill leaves only temp files, which SweepTemps removes, and a second extraction then succeeds.
func TestKillDuringExtract(t *testing.T) {
	if spec := os.Getenv(killChildEnv); spec != "" {
		bundlePath, dest, _ := strings.Cut(spec, "|")
		f, err := os.Open(bundlePath)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Extract(f, root(t, dest), Options{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	src := t.TempDir()
	files := map[string][]byte{}
	for i := range 48 {
		b := make([]byte, 1<<20)
		rand.Read(b)
		files[fmt.Sprintf("flashinfer/0.4.1/90a/cached_ops/op%02d/op%02d.so", i, i)] = b
	}
	names := writeTree(t, src, files)
	bundlePath := filepath.Join(t.TempDir(), "b"+Ext)
	out, err := os.Create(bundlePath)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Write(out, root(t, src), paths(t, names), Manifest{SKU: "sku-a", Component: "flashinfer"})
	out.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Entry{}
	for _, e := range res.Manifest.Entries {
		want[e.Path] = e
	}
	// Kill points: as soon as a temp file exists, after a few temps, and once renames began.
	for _, point := range []struct {
		name string
		hit  func(temps, finals int) bool
	}{
		{"first temp", func(tm, _ int) bool { return tm >= 1 }},
		{"mid-stream", func(tm, _ int) bool { return tm >= 20 }},
		{"during renames", func(_, fi int) bool { return fi >= 1 }},
	} {
		t.Run(point.name, func(t *testing.T) {
			dest := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringExtract$")
			cmd.Env = append(os.Environ(), killChildEnv+"="+bundlePath+"|"+dest)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			killed := false
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
				temps, finals := 0, 0
				for _, p := range listFiles(t, dest) {
					if IsTemp(p) {
						temps++
					} else {
						finals++
					}
				}
				if point.hit(temps, finals) {
					cmd.Process.Signal(syscall.SIGKILL)
					killed = true
					break
				}
				if cmd.ProcessState != nil {
					break
				}
				time.Sleep(200 * time.Microsecond)
			}
			cmd.Wait()
			if !killed {
				t.Log("child finished before the kill point; checking its result anyway")
			}
			for _, p := range listFiles(t, dest) {
				if IsTemp(p) {
					continue
				}
				e, ok := want[filepath.ToSlash(p)]
				b, err := os.ReadFile(filepath.Join(dest, p))
				if !ok || err != nil || int64(len(b)) != e.Size || sum(b) != e.SHA256 {
					t.Fatalf("torn or foreign file %s after kill -9", p)
				}
			}
			if _, err := SweepTemps(root(t, dest)); err != nil {
				t.Fatal(err)
			}
			f, _ := os.Open(bundlePath)
			defer f.Close()
			got, err := Extract(f, root(t, dest), Options{SHA256: res.SHA256})
			if err != nil {
				t.Fatalf("extract after kill: %v", err)
			}
			if got.Written+got.Existing != len(files) || len(got.Conflicts) != 0 {
				t.Fatalf("after kill: %+v", got)
			}
			for _, p := range listFiles(t, dest) {
				if IsTemp(p) {
					t.Fatalf("temp %s survived the sweep", p)
				}
			}
		})
	}
}
