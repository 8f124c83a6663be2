package phases

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Constructed logs for classes no real log in testdata shows (see testdata/README): every line's
// format is copied from a real log there or in the reference sheet; ranks, times and numbers are set
// to make the case.

func parseLines(t *testing.T, lines []string) Result {
	t.Helper()
	r, err := Parse(strings.NewReader(strings.Join(lines, "\n")+"\n"), Options{Source: t.Name(), Reference: ref})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rankLine is one line of rankLog: its true time, whether rank 1 printed it, and the text (vLLM
// header included, on the printing host's clock).
type rankLine struct {
	at    time.Time
	rank1 bool
	text  string
}

// rankLog is one start with an API server and two data-parallel ranks: rank 1 prints through
// prefix1, on a clock skew seconds off the API server's. Rank 1 is the slower one (compile 55 s).
func rankLog(prefix1 string, skew time.Duration) []rankLine {
	base := time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)
	s := time.Second
	spec := []struct {
		at     time.Duration
		rank1  bool
		format string
	}{
		{0, false, "(APIServer pid=1) INFO %s [api_server.py:1839] vLLM API server version 0.11.0"},
		{0, false, "(APIServer pid=1) INFO %s [utils.py:233] non-default args: {'model': 'Qwen/Qwen3-8B', 'data_parallel_size': 2}"},
		{10 * s, false, "(EngineCore_DP0 pid=20) INFO %s [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: model='Qwen/Qwen3-8B', tensor_parallel_size=1, data_parallel_size=2"},
		{10 * s, true, "INFO %s [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: model='Qwen/Qwen3-8B', tensor_parallel_size=1, data_parallel_size=2"},
		{15 * s, false, "(EngineCore_DP0 pid=20) INFO %s [gpu_model_runner.py:2602] Starting to load model Qwen/Qwen3-8B..."},
		{15 * s, true, "INFO %s [gpu_model_runner.py:2602] Starting to load model Qwen/Qwen3-8B..."},
		{30 * s, false, "(EngineCore_DP0 pid=20) INFO %s [gpu_model_runner.py:2653] Model loading took 15.2 GiB and 15.000000 seconds"},
		{32 * s, true, "INFO %s [gpu_model_runner.py:2653] Model loading took 15.2 GiB and 17.000000 seconds"},
		{35 * s, false, "(EngineCore_DP0 pid=20) INFO %s [backends.py:559] Dynamo bytecode transform time: 5.10 s"},
		{37 * s, true, "INFO %s [backends.py:559] Dynamo bytecode transform time: 6.00 s"},
		{36 * s, false, "(EngineCore_DP0 pid=20) INFO %s [backends.py:261] Cache the graph of compile range (1, 2048) for later use"},
		{80 * s, false, "(EngineCore_DP0 pid=20) INFO %s [monitor.py:34] torch.compile takes 50.20 s in total"},
		{87 * s, true, "INFO %s [monitor.py:34] torch.compile takes 55.00 s in total"},
		{90 * s, false, "(EngineCore_DP0 pid=20) INFO %s [kv_cache_utils.py:1087] GPU KV cache size: 457,024 tokens"},
		{90 * s, true, "INFO %s [kv_cache_utils.py:1087] GPU KV cache size: 457,024 tokens"},
		{101 * s, false, "(EngineCore_DP0 pid=20) INFO %s [gpu_model_runner.py:3480] Graph capturing finished in 10 secs, took 0.50 GiB"},
		{102 * s, true, "INFO %s [gpu_model_runner.py:3480] Graph capturing finished in 11 secs, took 0.50 GiB"},
		{102 * s, false, "(EngineCore_DP0 pid=20) INFO %s [core.py:210] init engine (profile, create kv cache, warmup model) took 92.00 seconds"},
		{103 * s, true, "INFO %s [core.py:210] init engine (profile, create kv cache, warmup model) took 92.50 seconds"},
		{105 * s, false, "(APIServer pid=1) INFO %s [api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000"},
		{105 * s, false, "(APIServer pid=1) INFO:     Application startup complete.%.0s"},
	}
	var out []rankLine
	for _, l := range spec {
		at, p := base.Add(l.at), ""
		if l.rank1 {
			at, p = at.Add(skew), prefix1
		}
		out = append(out, rankLine{at: base.Add(l.at), rank1: l.rank1, text: p + fmt.Sprintf(l.format, at.Format("01-02 15:04:05"))})
	}
	return out
}

// texts renders rankLog lines through a wrapper.
func texts(ls []rankLine, wrap func(rankLine) string) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = wrap(l)
	}
	return out
}

func raw(l rankLine) string { return l.text }

// Data-parallel ranks each print their compile totals: the result is the slowest rank's, not a sum,
// whatever wraps the rank's prefix (one host, Ray on another node, docker compose).
func TestDataParallelSlowestRank(t *testing.T) {
	for name, tc := range map[string]struct {
		prefix1 string
		wrap    func(rankLine) string
	}{
		"one host":       {"(EngineCore_DP1 pid=21) ", raw},
		"ray other node": {"(RayWorkerProc pid=2784025, ip=192.168.10.220) (EngineCore_DP1 pid=2784025) ", raw},
		"docker compose": {"(EngineCore_DP1 pid=21) ", func(l rankLine) string { return "vllm-dp  | " + l.text }},
	} {
		t.Run(name, func(t *testing.T) {
			r := parseLines(t, texts(rankLog(tc.prefix1, 0), tc.wrap))
			rep := r.Reported
			if rep.TorchCompileSeconds == nil || *rep.TorchCompileSeconds != 55 || rep.DynamoTransformSeconds == nil || *rep.DynamoTransformSeconds != 6 ||
				rep.ModelLoadSeconds == nil || *rep.ModelLoadSeconds != 17 || rep.GraphCaptureSeconds == nil || *rep.GraphCaptureSeconds != 11 {
				t.Errorf("reported %+v, want the slowest rank's (compile 55, dynamo 6, load 17, capture 11)", rep)
			}
			// One clock: the critical path waits for rank 1 (load ends at 32 s, compile at 87 s).
			checkResult(t, r, want{version: "0.11.0", engine: "v1", model: "Qwen/Qwen3-8B", tp: 1, outcome: OutcomeReady, cache: CacheMiss, clock: ClockVLLM,
				phases: map[string]float64{PhaseImports: 10, PhaseEngineStart: 5, PhaseWeightLoad: 17, PhaseTorchCompile: 55, PhaseKVCacheAndWarmup: 5, PhaseGraphCapture: 11, PhaseServerUp: 2, PhaseTotal: 105}}, "")
		})
	}
}

// A rank on another host whose clock runs tens of seconds off is measured on its own clock only:
// its lines never place the primary host's milestones, so no phase comes out negative or inflated.
func TestRankOnSkewedHost(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		skew   time.Duration
	}{
		{"(RayWorkerProc pid=7, ip=10.0.0.2) (EngineCore_DP1 pid=7) ", -40 * time.Second}, // Ray worker node behind
		{"(RayWorkerProc pid=7, ip=10.0.0.2) (EngineCore_DP1 pid=7) ", 40 * time.Second},  // ahead
		{"(RayWorkerProc pid=7, ip=10.0.0.2) (EngineCore_DP1 pid=7) ", -10 * time.Minute},
		{"(EngineCore_DP1 pid=21) ", -30 * time.Second}, // native multi-node DP, the second host's lines merged in
		{"(EngineCore_DP1 pid=21) ", 30 * time.Second},
	} {
		skew := tc.skew
		t.Run(tc.prefix+skew.String(), func(t *testing.T) {
			r := parseLines(t, texts(rankLog(tc.prefix, skew), raw))
			// Host A's own timeline (rank 0): load 15→30, compile →80, capture 91→101.
			checkResult(t, r, want{version: "0.11.0", tp: 1, outcome: OutcomeReady, cache: CacheMiss, clock: ClockVLLM,
				phases: map[string]float64{PhaseImports: 10, PhaseEngineStart: 5, PhaseWeightLoad: 15, PhaseTorchCompile: 50, PhaseKVCacheAndWarmup: 12, PhaseGraphCapture: 10, PhaseServerUp: 3, PhaseTotal: 105}}, "")
			if *r.Reported.TorchCompileSeconds != 55 {
				t.Errorf("reported compile %v, want rank 1's 55 (reported numbers need no clock)", *r.Reported.TorchCompileSeconds)
			}
		})
	}
	// A skew within the tolerance is one clock: the slowest rank sets the critical path.
	r := parseLines(t, texts(rankLog("(RayWorkerProc pid=7, ip=10.0.0.2) (EngineCore_DP1 pid=7) ", 2*time.Second), raw))
	for _, p := range r.Phases {
		if p.Name == PhaseTorchCompile && p.Start+p.Seconds != 89 {
			t.Errorf("2 s skew: torch_compile ends at %v s, want rank 1's 89", p.Start+p.Seconds)
		}
	}
}

// `kubectl logs --prefix --timestamps` over a leader and a worker pod on two nodes: each pod's
// timestamps are its node's; the worker's node (rank 1) is 30 s ahead, on both clocks.
func TestKubectlPrefixedPods(t *testing.T) {
	lines := texts(rankLog("(EngineCore_DP1 pid=21) ", 30*time.Second), func(l rankLine) string {
		if l.rank1 {
			return "[pod/vllm-0-1/vllm] " + l.at.Add(30*time.Second).Format(time.RFC3339Nano) + " " + l.text
		}
		return "[pod/vllm-0/vllm] " + l.at.Format(time.RFC3339Nano) + " " + l.text
	})
	r := parseLines(t, lines)
	checkResult(t, r, want{version: "0.11.0", tp: 1, outcome: OutcomeReady, cache: CacheMiss, clock: ClockKubectl,
		phases: map[string]float64{PhaseImports: 10, PhaseEngineStart: 5, PhaseWeightLoad: 15, PhaseTorchCompile: 50, PhaseKVCacheAndWarmup: 12, PhaseGraphCapture: 10, PhaseServerUp: 3, PhaseTotal: 105}}, "")
}

// FlashInfer builds its kernels quietly between the KV cache line and the capture (the seed's ~85 s);
// the tqdm bar has no time of its own and would take the line before. vLLM's "Graph capturing
// finished in N secs" places the capture's start: the quiet part is kv_cache_and_warmup.
func TestCaptureStartAfterQuietWarmup(t *testing.T) {
	lines := []string{
		"(APIServer pid=1) INFO 11-30 21:02:20 [api_server.py:1896] vLLM API server version 0.10.2",
		"(EngineCore_DP0 pid=214) INFO 11-30 21:02:25 [core.py:654] Initializing a V1 LLM engine (v0.10.2) with config: model='Qwen/Qwen2.5-7B-Instruct', tensor_parallel_size=1",
		"(EngineCore_DP0 pid=214) INFO 11-30 21:02:34 [gpu_model_runner.py:2107] Starting to load model Qwen/Qwen2.5-7B-Instruct...",
		"(EngineCore_DP0 pid=214) INFO 11-30 21:03:03 [gpu_model_runner.py:2128] Model loading took 14.2488 GiB and 28.500000 seconds",
		"(EngineCore_DP0 pid=214) INFO 11-30 21:03:08 [backends.py:194] Cache the graph for dynamic shape for later use",
		"(EngineCore_DP0 pid=214) INFO 11-30 21:04:05 [monitor.py:34] torch.compile takes 61.67 s in total",
		"(EngineCore_DP0 pid=214) INFO 11-30 21:04:06 [kv_cache_utils.py:868] Maximum concurrency for 32,768 tokens per request: 59.90x",
		"(EngineCore_DP0 pid=214) INFO 11-30 21:04:06 [kernel_warmup.py:76] Warming up FlashInfer attention.",
		"(EngineCore_DP0 pid=214) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|          | 0/67 [00:00<?, ?it/s]\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 [00:12<00:00,  5.3it/s]",
		"(EngineCore_DP0 pid=214) INFO 11-30 21:05:43 [gpu_model_runner.py:2977] Graph capturing finished in 12 secs, took 0.53 GiB",
		"(EngineCore_DP0 pid=214) INFO 11-30 21:05:43 [core.py:214] init engine (profile, create kv cache, warmup model) took 100.30 seconds",
		"(APIServer pid=1) INFO 11-30 21:05:44 [api_server.py:1944] Starting vLLM API server 0 on http://0.0.0.0:8000",
	}
	r := parseLines(t, lines)
	checkResult(t, r, want{version: "0.10.2", tp: 1, outcome: OutcomeReady, cache: CacheMiss, clock: ClockVLLM,
		phases: map[string]float64{PhaseImports: 5, PhaseEngineStart: 9, PhaseWeightLoad: 29, PhaseTorchCompile: 62, PhaseKVCacheAndWarmup: 86, PhaseGraphCapture: 12, PhaseServerUp: 1, PhaseTotal: 204}}, "")
}

// AOT compilation: a loaded artefact is a hit, a saved one a miss that filled the cache, an
// unusable one a miss; the artefact's dir (torch_aot_compile/<sha256>) is the cache the start used.
func TestAOTCompileCache(t *testing.T) {
	const sha = "246d253779277f957d6a2673435c81abe31cb5d6d154b82e0e53192b9ae9bd2e"
	aot := "/root/.cache/vllm/torch_compile_cache/torch_aot_compile/" + sha + "/rank_0_0/model"
	dir := "(EngineCore pid=79) INFO 07-30 07:07:10 [backends.py:1089] Using cache directory: /root/.cache/vllm/torch_compile_cache/7e47068371/rank_0_0/backbone for vLLM's torch.compile"
	for name, tc := range map[string]struct {
		lines []string
		want  CompileCache
	}{
		"saved": {[]string{dir,
			"(EngineCore pid=79) INFO 07-30 07:07:19 [backends.py:378] Cache the graph of compile range (1, 1024) for later use",
			"(EngineCore pid=79) INFO 07-30 07:07:29 [decorators.py:708] saved AOT compiled function to " + aot}, CacheMiss},
		"saved only": {[]string{"(EngineCore pid=79) INFO 07-30 07:07:29 [decorators.py:708] saved AOT compiled function to " + aot}, CacheMiss},
		"loaded":     {[]string{dir, "(EngineCore pid=79) INFO 07-30 07:07:12 [decorators.py:311] Directly load AOT compilation from path " + aot}, CacheHit},
		"unusable": {[]string{"(Worker pid=19850) WARNING 06-13 20:03:01 [decorators.py:480] Compiling model again due to a load failure from " + aot + ", reason: 'function' object has no attribute 'finalize_loading'",
			"(Worker pid=19850) INFO 06-13 20:03:32 [decorators.py:708] saved AOT compiled function to " + aot}, CacheMiss},
	} {
		t.Run(name, func(t *testing.T) {
			r := parseLines(t, tc.lines)
			if r.CompileCache != tc.want || r.CompileCacheHash != sha || r.CompileCacheDir != aot {
				t.Errorf("cache %s hash %q dir %q, want %s %s %s", r.CompileCache, r.CompileCacheHash, r.CompileCacheDir, tc.want, sha, aot)
			}
		})
	}
}

// A pydantic ValidationError whose message runs over several lines (transformers' "does not recognize
// this architecture", vLLM's invalid repository id): the first indented line says what is wrong, and
// the "[type=…]" tail comes later. Line shapes from vllm-project/vllm#26161 and vllm-omni#2170
// (testdata/real-issue-*-pydantic-*.log), message text from transformers and vLLM.
func TestValidationErrorOverSeveralLines(t *testing.T) {
	for name, tc := range map[string]struct {
		detail []string
		want   string
	}{
		"architecture": {[]string{
			"  Value error, The checkpoint you are trying to load has model type `qwen3_next` but Transformers does not recognize this architecture. This could be because of an issue with the checkpoint, or because your version of Transformers is out of date.",
			"",
			"You can update Transformers with the command `pip install --upgrade transformers`. [type=value_error, input_value=ArgsKwargs((), {'model': ...rocessor_plugin': None}), input_type=ArgsKwargs]",
		}, "The checkpoint you are trying to load has model type `qwen3_next` but Transformers does not recognize this architecture."},
		"repository id": {[]string{
			"  Value error, Invalid repository ID or local directory specified: 'Qwen/Qwen3-8B-Instrukt'.",
			"Please verify the following requirements:",
			"1. Provide a valid Hugging Face repository ID. [type=value_error, input_value=ArgsKwargs((), {'model': ...}), input_type=ArgsKwargs]",
		}, "Invalid repository ID or local directory specified: 'Qwen/Qwen3-8B-Instrukt'."},
		"field": {[]string{
			"max_model_len",
			"  Input should be a valid integer, unable to parse string as an integer [type=int_parsing, input_value='32k', input_type=str]",
		}, "max_model_len: Input should be a valid integer, unable to parse string as an integer"},
	} {
		t.Run(name, func(t *testing.T) {
			lines := []string{
				"(APIServer pid=1) INFO 11-30 21:00:00 [utils.py:233] non-default args: {'model': 'Qwen/Qwen3-8B'}",
				"(APIServer pid=1) Traceback (most recent call last):",
				`(APIServer pid=1)   File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", line 1360, in create_model_config`,
				"(APIServer pid=1)     return ModelConfig(",
				"(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
			}
			for _, d := range tc.detail {
				lines = append(lines, "(APIServer pid=1) "+d)
			}
			lines = append(lines, "(APIServer pid=1)     For further information visit https://errors.pydantic.dev/2.12/v/value_error")
			r := parseLines(t, lines)
			if r.Outcome != OutcomeFailed || !strings.HasPrefix(r.Error, tc.want) || r.TensorParallelSize != 1 {
				t.Errorf("outcome %s tp %d error %q, want failed, 1, %q", r.Outcome, r.TensorParallelSize, r.Error, tc.want)
			}
		})
	}
}

// `docker compose logs` of two vLLM services: each is its own start; the first one's API server
// makes its container the start measured, the other's lines do not move its milestones.
func TestComposeTwoServices(t *testing.T) {
	a := texts(rankLog("(EngineCore_DP1 pid=21) ", 0), func(l rankLine) string { return "vllm-a  | " + l.text })
	// b starts 3 s later on the same clock: not a skew, a second start
	b := texts(rankLog("(EngineCore_DP1 pid=21) ", 0), func(l rankLine) string {
		t := strings.Replace(l.text, l.at.Format("01-02 15:04:05"), l.at.Add(3*time.Second).Format("01-02 15:04:05"), 1)
		return "vllm-b  | " + t
	})
	var lines []string
	for i := range a {
		lines = append(lines, a[i], b[i])
	}
	r := parseLines(t, lines)
	checkResult(t, r, want{version: "0.11.0", tp: 1, outcome: OutcomeReady, cache: CacheMiss, clock: ClockVLLM,
		phases: map[string]float64{PhaseImports: 10, PhaseEngineStart: 5, PhaseWeightLoad: 17, PhaseTorchCompile: 55, PhaseKVCacheAndWarmup: 5, PhaseGraphCapture: 11, PhaseServerUp: 2, PhaseTotal: 105}}, "")
}
