package cli

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/prefetch"
)

// writeTinyModel writes a loadable 2-shard model (config.json, index, safetensors) under dir.
func writeTinyModel(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{"config.json": []byte(`{"model_type":"llama"}`)}
	wm := map[string]string{}
	for i, n := range []int{300000, 12345} {
		name := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i]
		tensor := []string{"a", "b"}[i]
		hdr, _ := json.Marshal(map[string]any{tensor: map[string]any{"dtype": "U8", "shape": []int{n}, "data_offsets": []int{0, n}}})
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
		b = append(append(b, hdr...), make([]byte, n)...)
		for j := range n {
			b[8+len(hdr)+j] = byte(j * 7)
		}
		files[name] = b
		wm[tensor] = name
	}
	files["model.safetensors.index.json"], _ = json.Marshal(map[string]any{"weight_map": wm})
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

func TestPrefetchWeights(t *testing.T) {
	src, dest := t.TempDir(), t.TempDir()
	files := writeTinyModel(t, src)
	t.Run("source dir publishes an HF snapshot", func(t *testing.T) {
		cmd := warmd(t, "prefetch", "weights", "file://"+src+"/", dest, "--name", "acme/tiny", "--progress", "plain", "-o", "json")
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v\n%s", err, errOut.String())
		}
		var res []prefetch.ModelStatus
		if err := json.Unmarshal([]byte(out.String()), &res); err != nil || len(res) != 1 {
			t.Fatalf("output %q: %v", out.String(), err)
		}
		want := filepath.Join(dest, "models--acme--tiny", "snapshots", "main")
		if !res[0].Verified("acme/tiny", "main") || res[0].SnapshotPath != want {
			t.Fatalf("result %+v; want ready at %s", res[0], want)
		}
		for n, b := range files {
			got, err := os.ReadFile(filepath.Join(want, n))
			if err != nil || sha256.Sum256(got) != sha256.Sum256(b) {
				t.Errorf("%s in the snapshot differs from the source: %v", n, err)
			}
		}
		if !strings.Contains(errOut.String(), "acme/tiny: ready") {
			t.Errorf("plain progress lacks the ready line:\n%s", errOut.String())
		}
	})
	t.Run("--page-cache keep publishes the same snapshot; a bad mode exits 2", func(t *testing.T) {
		d := t.TempDir()
		if out, err := warmd(t, "prefetch", "weights", "file://"+src+"/", d, "--name", "acme/kept", "--page-cache", "keep", "--progress", "none").CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for n, b := range files {
			got, err := os.ReadFile(filepath.Join(d, "models--acme--kept", "snapshots", "main", n))
			if err != nil || sha256.Sum256(got) != sha256.Sum256(b) {
				t.Errorf("%s in the snapshot differs from the source: %v", n, err)
			}
		}
		out, err := warmd(t, "prefetch", "weights", "file://"+src+"/", t.TempDir(), "--page-cache", "readBack", "--progress", "none").CombinedOutput()
		if code := exitCodeOf(err); code != 2 || !strings.Contains(string(out), "use bypass or keep") {
			t.Fatalf("exit %d, output:\n%s\nwant exit 2 naming the modes", code, out)
		}
	})
	t.Run("missing shard fails with exit 1 naming it", func(t *testing.T) {
		os.Remove(filepath.Join(src, "model-00002-of-00002.safetensors"))
		cmd := warmd(t, "prefetch", "weights", "file://"+src+"/", t.TempDir(), "--name", "acme/broken", "--progress", "none")
		out, err := cmd.CombinedOutput()
		if code := exitCodeOf(err); code != 1 || !strings.Contains(string(out), "model-00002-of-00002.safetensors") {
			t.Fatalf("exit %d, output:\n%s\nwant exit 1 naming the missing shard", code, out)
		}
	})
	t.Run("bad usage exits 2", func(t *testing.T) {
		out, err := warmd(t, "prefetch", "weights", "only-one-arg").CombinedOutput()
		if code := exitCodeOf(err); code != 2 {
			t.Fatalf("exit %d, output:\n%s", code, out)
		}
	})
}

// TestPrefetchWeightsBesideTheDaemonIsRefused: a one-shot prefetch into the data dir a daemon holds
// would be a second writer of its staging, blobs and records; it is refused, naming the daemon.
func TestPrefetchWeightsBesideTheDaemonIsRefused(t *testing.T) {
	dir, _, stderr := startDaemon(t)
	sock := filepath.Join(dir, "warmd.sock")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon never listened: %s", stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	src := t.TempDir()
	cfg := filepath.Join(dir, "prefetch.yaml")
	os.WriteFile(cfg, []byte("apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nnodeName: n1\ndataDir: "+dir+
		"\nmodels: [{name: acme/m, source: \"file://"+src+"/\"}]\n"), 0o644)
	out, err := warmd(t, "prefetch", "weights", "--config", cfg, "--progress", "none").CombinedOutput()
	if code := exitCodeOf(err); code != 1 || !strings.Contains(string(out), "warmd run") || !strings.Contains(string(out), "warmd status") {
		t.Fatalf("exit %d, output:\n%s\nwant exit 1 naming the daemon and `warmd status`", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "weights", "models--acme--m")); !os.IsNotExist(err) {
		t.Errorf("the refused prefetch wrote under the daemon's data dir: %v", err)
	}
}
