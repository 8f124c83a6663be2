package phases

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkResult compares r with w the way TestParseFixtures does (phases ±0.011 s, absent phases and
// reported keys absent). errHas is a substring the error must contain ("" = no error).
func checkResult(t *testing.T, r Result, w want, errHas string) {
	t.Helper()
	check := func(field, got, want string) {
		if want != "" && got != want {
			t.Errorf("%s = %q, want %q", field, got, want)
		}
	}
	check("version", r.VLLMVersion, w.version)
	check("engine", r.Engine, w.engine)
	check("model", r.Model, w.model)
	check("outcome", string(r.Outcome), string(w.outcome))
	check("compile cache", string(r.CompileCache), string(w.cache))
	check("cache hash", r.CompileCacheHash, w.hash)
	check("clock", r.Clock, w.clock)
	if r.TensorParallelSize != w.tp {
		t.Errorf("tp = %d, want %d", r.TensorParallelSize, w.tp)
	}
	if !strings.Contains(r.Error, errHas) || (errHas == "") != (r.Error == "") {
		t.Errorf("error = %q, want one containing %q", r.Error, errHas)
	}
	if w.phases == nil {
		return
	}
	for _, name := range PhaseOrder {
		got, ok := r.Phase(name)
		exp, want := w.phases[name]
		switch {
		case ok != want:
			t.Errorf("phase %s present=%v (%.3f), want present=%v", name, ok, got, want)
		case ok && (got < exp-0.011 || got > exp+0.011):
			t.Errorf("phase %s = %.3f s, want %.3f", name, got, exp)
		}
	}
	for _, p := range r.Phases {
		if p.Seconds < 0 || p.Start < 0 {
			t.Errorf("phase %s starts at %.3f for %.3f s: negative", p.Name, p.Start, p.Seconds)
		}
	}
}

// TestRealLogs parses other people's vLLM logs (testdata/README names each source). The expected
// numbers were read off the logs by hand: phases on vLLM's own 1 s clock, capture placed by the
// seconds vLLM printed, failures timed to the first line saying so.
func TestRealLogs(t *testing.T) {
	tests := []struct {
		file   string
		want   want
		errHas string
	}{
		{"real-v0.8.5.post1-hit.log", want{version: "0.8.5.post1", engine: "v1", model: "/opt/llm/deepseek-r1-14b", tp: 1, outcome: OutcomeReady, cache: CacheHit, hash: "ca01316bdf", clock: ClockVLLM,
			// no tqdm line: "Graph capturing finished in 33 secs" alone places the capture
			phases: map[string]float64{PhaseImports: 20, PhaseEngineStart: 1, PhaseWeightLoad: 4, PhaseTorchCompile: 23, PhaseKVCacheAndWarmup: 1, PhaseGraphCapture: 33, PhaseServerUp: 1, PhaseTotal: 83}}, ""},
		{"real-v0.9.0.1-eager.log", want{version: "0.9.0.1", engine: "v1", model: "meta-llama/Llama-3.2-1B-Instruct", tp: 1, outcome: OutcomeReady, cache: CacheDisabled, clock: ClockVLLM,
			phases: map[string]float64{PhaseImports: 26, PhaseEngineStart: 1, PhaseWeightLoad: 1, PhaseKVCacheAndWarmup: 0, PhaseServerUp: 1, PhaseTotal: 29}}, ""},
		{"real-v0.10.0-hit-health.log", want{version: "0.10.0", engine: "v1", tp: 1, outcome: OutcomeReady, cache: CacheHit, hash: "8b3c9b5dfe", clock: ClockVLLM,
			phases: map[string]float64{PhaseImports: 9, PhaseEngineStart: 0, PhaseWeightLoad: 10, PhaseTorchCompile: 10, PhaseKVCacheAndWarmup: 2, PhaseGraphCapture: 4, PhaseServerUp: 0, PhaseFirstHealth: 0, PhaseTotal: 35}}, ""},
		{"real-v0.11.0-download-miss.log", want{version: "0.11.0", engine: "v1", model: "meta-llama/Meta-Llama-3.1-8B-Instruct", tp: 1, outcome: OutcomeReady, cache: CacheMiss, hash: "14f1bc06e9", clock: ClockVLLM,
			// capture 7 s by vLLM, kept after the KV cache line one second later (1 s clock)
			phases: map[string]float64{PhaseImports: 44, PhaseEngineStart: 3, PhaseWeightsDownload: 111, PhaseWeightLoad: 22, PhaseTorchCompile: 48, PhaseKVCacheAndWarmup: 2, PhaseGraphCapture: 6, PhaseServerUp: 3, PhaseTotal: 239}}, ""},
		{"real-v0.13.0-download-oom-kv-profile.log", want{version: "0.13.0", engine: "v1", model: "Qwen/Qwen2.5-Coder-7B-Instruct", tp: 1, outcome: OutcomeFailed, cache: CacheUnknown, hash: "708c1b2aab", clock: ClockVLLM,
			phases: map[string]float64{PhaseImports: 8, PhaseEngineStart: 1, PhaseWeightsDownload: 878, PhaseWeightLoad: 3, PhaseTotal: 901}},
			"InductorError: RuntimeError: Failed to run autotuning code block: CUDA out of memory"},
		{"real-v0.13.0-oom-at-load.log", want{version: "0.13.0", engine: "v1", model: "Qwen/Qwen2.5-Coder-14B-Instruct", tp: 1, outcome: OutcomeFailed, cache: CacheDisabled, clock: ClockVLLM,
			phases: map[string]float64{PhaseImports: 8, PhaseEngineStart: 1, PhaseTotal: 25}},
			"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 270.00 MiB"},
		{"real-v0.13.0-importerror-at-load.log", want{version: "0.13.0", engine: "v1", model: "Qwen/Qwen2.5-Coder-7B-Instruct", tp: 1, outcome: OutcomeFailed, cache: CacheUnknown, clock: ClockVLLM,
			phases: map[string]float64{PhaseImports: 15, PhaseEngineStart: 1, PhaseTotal: 17}},
			"ImportError: /home/k/.local/lib/python3.12/site-packages/flash_attn_2_cuda"},
		{"real-v0.15.1-tp2-hit-server-crash.log", want{version: "0.15.1", engine: "v1", model: "/gpt-oss-120b", tp: 2, outcome: OutcomeFailed, cache: CacheHit, hash: "845e1dd74a", clock: ClockVLLM,
			phases: map[string]float64{PhaseImports: 86, PhaseEngineStart: 89, PhaseWeightLoad: 102, PhaseTorchCompile: 39, PhaseKVCacheAndWarmup: 3, PhaseGraphCapture: 136, PhaseTotal: 460}},
			"openai_harmony.HarmonyError: invalid tiktoken vocab file"},
		{"real-v0.17.1-logo-aot-hit.log", want{version: "0.17.1", engine: "v1", model: "meta-llama/Llama-3.1-8B-Instruct", tp: 1, outcome: OutcomeReady, cache: CacheHit,
			hash: "8bcfa2022c7515057db3e6430cbd55933e9db4f08aad3e63b22632890c8737c4", clock: ClockVLLM,
			phases: map[string]float64{PhaseImports: 23, PhaseEngineStart: 7, PhaseWeightLoad: 11, PhaseTorchCompile: 16, PhaseKVCacheAndWarmup: 1, PhaseGraphCapture: 6, PhaseServerUp: 2, PhaseTotal: 66}}, ""},
		{"real-v0.19.1-logo-aot-hit.log", want{version: "0.19.1", engine: "v1", model: "microsoft/Phi-3-mini-4k-instruct", tp: 1, outcome: OutcomeReady, cache: CacheHit,
			hash: "780d58850302dab16d78923f436ea78bc216475073e24c2d4c0e98e25c6cf2a3", clock: ClockVLLM,
			phases: map[string]float64{PhaseImports: 12, PhaseEngineStart: 1, PhaseWeightLoad: 8, PhaseTorchCompile: 6, PhaseKVCacheAndWarmup: 2, PhaseGraphCapture: 7, PhaseServerUp: 8, PhaseTotal: 44}}, ""},
		// Excerpts from issue threads.
		{"real-issue-22301-v0.10.0-config-crash.log", want{version: "0.10.0", model: "openai/gpt-oss-120b", tp: 1, outcome: OutcomeIncomplete, cache: CacheUnknown, clock: ClockVLLM}, ""},
		{"real-issue-26161-pydantic-config.log", want{outcome: OutcomeFailed, cache: CacheUnknown, clock: ClockNone}, "Expecting value: line 1 column 1 (char 0)"},
		{"real-issue-omni-2170-pydantic-prefixed.log", want{outcome: OutcomeFailed, cache: CacheUnknown, clock: ClockNone}, "No model architectures are specified"},
		{"real-issue-club3090-178-tp2-aot-hit.log", want{outcome: OutcomeIncomplete, cache: CacheHit, clock: ClockVLLM,
			hash: "11e113ea8a8071477ca5afbfaf3c588bd125dea86d4c31375581cd47c2877055"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			checkResult(t, parseFile(t, tc.file), tc.want, tc.errHas)
		})
	}
}

// readPrefix returns the first n lines of a fixture, newlines kept: a real log cut where a start
// that crashed at config time would have stopped.
func readPrefix(t *testing.T, name string, n int) string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sb strings.Builder
	br := bufio.NewReader(f)
	for range n {
		l, err := br.ReadString('\n')
		sb.WriteString(l)
		if err != nil {
			break
		}
	}
	return sb.String()
}

// The 2026 ASCII-art logo carries the version (and model) beside block characters in whichever
// file logs it, and a start that stops before the engine config still has a TP size: vLLM's
// default 1 unless the non-default args set it. Each case is a log cut after its args line: real
// ones, and one constructed CRI log for ANSI-coloured prefixes, which the indexed copies of the
// real logs do not keep (testdata/README).
func TestLogoAndDefaultTP(t *testing.T) {
	tests := []struct {
		file           string
		lines          int
		version, model string
		tp             int
	}{
		{"real-v0.19.1-logo-aot-hit.log", 9, "0.19.1", "microsoft/Phi-3-mini-4k-instruct", 1},      // [utils.py:299], no TP in args
		{"real-v0.17.1-logo-aot-hit.log", 7, "0.17.1", "meta-llama/Llama-3.1-8B-Instruct", 1},      // [utils.py:302]
		{"real-v0.15.1-tp2-hit-server-crash.log", 7, "0.15.1", "/gpt-oss-120b", 2},                 // [utils.py:325], 'tensor_parallel_size': 2
		{"real-issue-22301-v0.10.0-config-crash.log", 4, "0.10.0", "openai/gpt-oss-120b", 1},       // one-line banner
		{"real-v0.8.5.post1-hit.log", 3, "0.8.5.post1", "/opt/llm/deepseek-r1-14b", 1},             // args: Namespace(…, tensor_parallel_size=1, …)
		{"real-v0.13.0-importerror-at-load.log", 2, "0.13.0", "Qwen/Qwen2.5-Coder-7B-Instruct", 1}, // (APIServer pid=…) prefixes, no TP in args
		{"v0.10.1-v1-download.log", 2, "0.10.1", "microsoft/Phi-3.5-mini-instruct", 1},             // ANSI-coloured prefixes in CRI framing
		{"real-issue-club3090-178-tp2-aot-hit.log", 5, "", "", 0},                                  // no args, no config: unknown, not 1
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			r, err := Parse(strings.NewReader(readPrefix(t, tc.file, tc.lines)), Options{Reference: ref})
			if err != nil {
				t.Fatal(err)
			}
			if r.VLLMVersion != tc.version || r.Model != tc.model || r.TensorParallelSize != tc.tp {
				t.Errorf("version %q model %q tp %d, want %q %q %d", r.VLLMVersion, r.Model, r.TensorParallelSize, tc.version, tc.model, tc.tp)
			}
		})
	}
}

// Process prefixes of real multi-rank logs name the innermost rank, its node and its DP rank.
func TestRankPrefixes(t *testing.T) {
	tests := []struct {
		file, contains          string
		proc, host, dp, msgHead string
		repeated                bool
	}{
		{"real-issue-45150-ray-dp-3hosts-load.log", "Model loading took 12.01 GiB", "Worker_DP2_TP0_EP4 pid=2252325", "192.168.10.216", "2", "Model loading took", false},
		{"real-issue-45150-ray-dp-3hosts-load.log", "(3/3) [repeated", "Worker_DP1_TP0_EP2 pid=2784025", "192.168.10.220", "1", "Prefetching checkpoint files: 30% (3/3)", true},
		{"real-issue-45150-ray-dp-3hosts-capture.log", "Registering 5590", "Worker_DP0_TP1_EP1 pid=3865417", "", "", "Registering 5590 cuda graph addresses", true},
		{"real-issue-29271-dp4-one-host.log", "DP rank 2", "EngineCore_DP2 pid=7085", "", "2", "rank 2 in world size 4", false},
		{"real-issue-29271-dp4-one-host.log", "Starting to load", "EngineCore_DP0 pid=7081", "", "", "Starting to load model", false},
		{"real-v0.15.1-tp2-hit-server-crash.log", "Starting to load model", "Worker_TP0 pid=41", "", "", "Starting to load model", false},
	}
	for _, tc := range tests {
		t.Run(tc.file+"/"+tc.contains, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var line string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, tc.contains) {
					line = l
					break
				}
			}
			if line == "" {
				t.Fatalf("no line with %q", tc.contains)
			}
			in := split(line)
			if in.proc != tc.proc || in.host != tc.host || in.dp != tc.dp || in.repeated != tc.repeated ||
				!strings.HasPrefix(in.msg, tc.msgHead) || strings.Contains(in.msg, "[repeated") {
				t.Errorf("split = proc %q host %q dp %q repeated %v msg %.60q", in.proc, in.host, in.dp, in.repeated, in.msg)
			}
		})
	}
	// The DP ranks of one host share one clock: all four are measured together.
	r := parseFile(t, "real-issue-29271-dp4-one-host.log")
	if r.Outcome != OutcomeIncomplete || len(r.Phases) != 0 {
		t.Errorf("excerpt: outcome %s phases %v", r.Outcome, r.Phases)
	}
}
