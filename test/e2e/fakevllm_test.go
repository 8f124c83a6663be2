package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The fake vLLM replays a real vLLM 0.10.2 start (pkg/phases/testdata, the seed's 7B cold and warm
// logs) into the kubelet's pod-log dir in CRI format, line by line, with timestamps moved to now. Like
// vLLM it decides hit or miss by looking for its torch.compile cache dir under VLLM_CACHE_ROOT: when
// it is there it "loads" (the warm log); when not it "compiles" (the cold log) and writes the files
// vLLM, Inductor, Triton and FlashInfer would leave behind, at the paths `warmd cache env` gave it.

const compileHash = "3ac1b9c47e" // the hash dir the seed logs print

type fakeStart struct {
	hit bool
	log string
}

func fakeVLLM(t *testing.T, podLogs, ns, pod, uid string, env map[string]string) fakeStart {
	t.Helper()
	graphDir := filepath.Join(env["VLLM_CACHE_ROOT"], "torch_compile_cache", compileHash, "rank_0_0", "backbone")
	_, err := os.Stat(filepath.Join(graphDir, "computation_graph.py"))
	hit := err == nil
	src := "../../pkg/phases/testdata/seed-7b-cold.log"
	if hit {
		src = "../../pkg/phases/testdata/seed-7b-warm.log"
	} else {
		writeCompileCaches(t, graphDir, env)
	}
	dir := filepath.Join(podLogs, fmt.Sprintf("%s_%s_%s", ns, pod, uid), "vllm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "0.log")
	replayCRI(t, src, logPath)
	return fakeStart{hit: hit, log: logPath}
}

// replayCRI copies a CRI log, shifting its timestamps so the start happened just now, a few lines at
// a time as a container runtime would append them.
func replayCRI(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var shift time.Duration
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for i := 0; sc.Scan(); i++ {
		line := sc.Text()
		ts, rest, ok := strings.Cut(line, " ")
		when, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil {
			t.Fatalf("%s: not a CRI line: %q", src, line)
		}
		if i == 0 {
			shift = time.Since(when) - 5*time.Minute // the whole start ends about now
		}
		fmt.Fprintf(out, "%s %s\n", when.Add(shift).UTC().Format(time.RFC3339Nano), rest)
		if i%8 == 7 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// writeCompileCaches leaves what a compiling vLLM start leaves: its torch.compile artifacts, Inductor
// and Triton kernels, and a FlashInfer JIT module written through a .lock file.
func writeCompileCaches(t *testing.T, graphDir string, env map[string]string) {
	t.Helper()
	files := map[string]string{
		filepath.Join(graphDir, "computation_graph.py"):                                          "# graph\n",
		filepath.Join(graphDir, "vllm_compile_cache.py"):                                         "{}\n",
		filepath.Join(env["TORCHINDUCTOR_CACHE_DIR"], "fxgraph", "ab", "fabc123", "fxgraph.pkl"): strings.Repeat("i", 4096),
		filepath.Join(env["TRITON_CACHE_DIR"], "Q2HASHAAA", "triton_poi_fused_0.json"):           `{"name":"triton_poi_fused_0"}`,
		filepath.Join(env["TRITON_CACHE_DIR"], "Q2HASHAAA", "triton_poi_fused_0.cubin"):          strings.Repeat("c", 8192),
		filepath.Join(env["FLASHINFER_WORKSPACE_BASE"], ".cache", "flashinfer", "0.3.1", "90a", "cached_ops",
			"batch_prefill", "batch_prefill.so"): strings.Repeat("s", 65536),
	}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
}
