package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/cache/cachetest"
	"warmd.io/warmd/pkg/datadir"
)

func runCache(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.SetArgs(append([]string{"cache"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// TestCacheEnvRefusesANameThatIsNoModelID: the per-model vLLM root is the model's slug, which only a
// valid model id has; any other name is refused instead of sanitized into a dir that another name
// ("org/a b" and "org/a-b") could share.
func TestCacheEnvRefusesANameThatIsNoModelID(t *testing.T) {
	_, _, err := runCache(t, "env", "--model", "org/a b")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 2 || !strings.Contains(err.Error(), "model name") {
		t.Fatalf("err = %v, want exit 2 naming the model name rule", err)
	}
}

// TestCacheEnv: the printed settings parse as pod-spec pieces, and the hostPath and env paths are the
// ones the daemon manages (the node link, the component dirs under the mount).
func TestCacheEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		vllmRoot string
	}{
		{"shared", nil, "/warmd/compile-cache/vllm"},
		{"per model", []string{"--model", "Qwen/Qwen2.5-7B-Instruct"}, "/warmd/compile-cache/vllm/models/qwen--qwen2.5-7b-instruct"},
		{"per model, lower case", []string{"--model", "gpt2"}, "/warmd/compile-cache/vllm/models/gpt2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCache(t, append([]string{"env", "--data-dir", "/var/lib/warmd"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			var st podCacheSettings
			if err := yaml.UnmarshalStrict([]byte(out), &st); err != nil {
				t.Fatalf("output is not pod-spec YAML: %v\n%s", err, out)
			}
			env := map[string]string{}
			for _, e := range st.Env {
				env[e.Name] = e.Value
			}
			want := map[string]string{"VLLM_CACHE_ROOT": tc.vllmRoot, "TORCHINDUCTOR_CACHE_DIR": "/warmd/compile-cache/inductor",
				"TRITON_CACHE_DIR": "/warmd/compile-cache/triton", "FLASHINFER_WORKSPACE_BASE": "/warmd/compile-cache/flashinfer"}
			for k, v := range want {
				if env[k] != v {
					t.Fatalf("%s = %q, want %q", k, env[k], v)
				}
			}
			if len(st.Volumes) != 1 || st.Volumes[0].HostPath == nil || st.Volumes[0].HostPath.Path != "/var/lib/warmd/compile-cache/node" ||
				len(st.VolumeMounts) != 1 || st.VolumeMounts[0].MountPath != cache.PodMountPath || st.VolumeMounts[0].Name != st.Volumes[0].Name {
				t.Fatalf("volume %+v mount %+v", st.Volumes, st.VolumeMounts)
			}
		})
	}
}

// TestCacheExportImportLs: export on one data dir, import on another of the same SKU, list it; an
// import into another SKU's tree fails with exit code 1 and says why.
func TestCacheExportImportLs(t *testing.T) {
	const sku = "nvidia-h200.sm90.cuda13.0.drv580-1a2b3c4d"
	src, dst, other, out := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	m, err := cache.NewManager(cache.Options{DataDir: src, SKU: sku})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cachetest.Write(m.Layout().Root(), cachetest.Small); err != nil {
		t.Fatal(err)
	}
	stdout, _, err := runCache(t, "export", "--data-dir", src, "--out", out) // SKU from the node link
	if err != nil {
		t.Fatal(err)
	}
	files := strings.Fields(stdout)
	if len(files) < 4 {
		t.Fatalf("export listed %v", files)
	}
	stdout, _, err = runCache(t, append([]string{"import", "--data-dir", dst, "--sku", sku}, files...)...)
	if err != nil || strings.Count(stdout, "imported") != len(files) {
		t.Fatalf("import: %v\n%s", err, stdout)
	}
	if _, err := os.Stat(filepath.Join(dst, "compile-cache", sku, "flashinfer/.cache/flashinfer/0.4.1/90a/cached_ops")); err != nil {
		t.Fatal(err)
	}
	stdout, _, err = runCache(t, "ls", "--data-dir", dst)
	if err != nil || !strings.Contains(stdout, "imported") || !strings.Contains(stdout, "flashinfer=0.4.1") {
		t.Fatalf("ls: %v\n%s", err, stdout)
	}
	_, stderr, err := runCache(t, "import", "--data-dir", other, "--sku", "nvidia-h100-80gb-hbm3.sm90.cuda12.8.drv570-5e6f7a8b", files[0])
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 1 || !strings.Contains(stderr, "built on SKU") {
		t.Fatalf("import into another SKU: err %v, stderr %q", err, stderr)
	}
	_, _, err = runCache(t, "ls", "--data-dir", t.TempDir())
	if !errors.As(err, &ee) || ee.Code != 2 {
		t.Fatalf("ls without a SKU: %v, want exit 2", err)
	}
}

// TestCacheWritersTakeTheDataDirLock: with another CLI writer holding the data dir (no daemon socket
// to go through), import and pull refuse, naming the holder, and write nothing.
func TestCacheWritersTakeTheDataDirLock(t *testing.T) {
	const sku = "nvidia-h200.sm90.cuda13.0.drv580-1a2b3c4d"
	dir := t.TempDir()
	lock, err := datadir.Acquire(dir, datadir.Holder{Command: "warmd prefetch weights"})
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	bundle := filepath.Join(t.TempDir(), "triton", "b.tar.zst")
	os.MkdirAll(filepath.Dir(bundle), 0o755)
	os.WriteFile(bundle, []byte("not read"), 0o644)
	_, _, err = runCache(t, "import", "--data-dir", dir, "--sku", sku, bundle)
	if !errors.Is(err, datadir.ErrLocked) || !strings.Contains(err.Error(), "warmd prefetch weights") {
		t.Fatalf("import beside another writer: %v, want the lock error naming it", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "compile-cache")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused import created the compile-cache dir (%v)", err)
	}
}
