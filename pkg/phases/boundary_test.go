package phases

import (
	"strings"
	"testing"
)

// TestBoundaryClasses parses real excerpts (testdata/README) of the classes the CUDA summary lines
// miss: deaths without a Python traceback (a GPU fault and hang under ROCm, an NCCL watchdog, a
// shell's "Aborted (core dumped)") and a CPU backend's log that starts part-way with the KV-cache
// lines before the warm-up compile. Expected values are read off the logs by hand.
func TestBoundaryClasses(t *testing.T) {
	tests := []struct {
		file   string
		want   want
		errHas string
	}{
		// No clock at all: failed with the GPU fault as the cause (the hang and the shell's Aborted
		// follow from it), no time to failure.
		{"real-issue-rocm-6157-v0.19-gpu-hang-aborted.log", want{outcome: OutcomeFailed, cache: CacheUnknown, clock: ClockNone},
			"Memory access fault by GPU node-1"},
		// The watchdog's timeout is the cause although the worker's death (exit code -6) is logged first.
		{"real-issue-6042-nccl-watchdog.log", want{outcome: OutcomeFailed, cache: CacheUnknown, clock: ClockVLLM,
			phases: map[string]float64{PhaseTotal: 0}}, "Watchdog caught collective operation timeout"},
		// Capture under way when the GPU faulted: failed, timed to the fault (the last time seen).
		{"real-issue-35169-rocm-fault-in-capture.log", want{outcome: OutcomeFailed, cache: CacheUnknown, clock: ClockVLLM,
			phases: map[string]float64{PhaseTotal: 0}}, "Write access to a read-only page"},
		// Part-way: no banner, no engine config, no load start. The load's end line starts the KV-cache
		// stage; its end is the KV-cache size (1 s later). Known gap: the CPU warm-up compile after it
		// (to 13:43:42) is not yet added to the phase. Still starting; the AOT save says miss.
		{"real-issue-39910-cpu-s390x-partway.log", want{outcome: OutcomeIncomplete, cache: CacheMiss, clock: ClockVLLM,
			hash: "4fd77dd9f24b824c6b5eb723c73309f4ef5fdf7ffca46d4d5f07d28e7acf6a6b", phases: map[string]float64{PhaseKVCacheAndWarmup: 1}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			checkResult(t, parseFile(t, tc.file), tc.want, tc.errHas)
		})
	}
}

// Constructed logs (not copies) for the stage boundaries of front ends without the CUDA summary
// lines: a CPU V0 server (no "Model loading took", no "init engine … took", no capture) whose phases
// end at the next stage's first line, and an offline LLM run, ready when it submits its prompts.
func TestStageBoundaries(t *testing.T) {
	cpu := `INFO 05-14 17:28:13 [importing.py:53] Triton module has been replaced with a placeholder.
INFO 05-14 17:28:21 [llm_engine.py:240] Initializing a V0 LLM engine (v0.8.5.post1) with config: model='Qwen/Qwen3-14B', tensor_parallel_size=1, enforce_eager=True, device_config=cpu
INFO 05-14 17:28:24 [weight_utils.py:265] Using model weights format ['*.safetensors']
INFO 05-14 17:28:40 [executor_base.py:112] # cpu blocks: 1638, # CPU blocks: 0
INFO 05-14 17:28:41 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000
INFO:     Application startup complete.
`
	r, err := Parse(strings.NewReader(cpu), Options{Reference: ref})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, want{version: "0.8.5.post1", engine: "v0", model: "Qwen/Qwen3-14B", tp: 1, outcome: OutcomeReady, cache: CacheDisabled, clock: ClockVLLM,
		phases: map[string]float64{PhaseImports: 8, PhaseEngineStart: 3, PhaseWeightLoad: 16, PhaseKVCacheAndWarmup: 1, PhaseServerUp: 0, PhaseTotal: 28}}, "")

	offline := `INFO 11-19 08:04:01 [__init__.py:216] Automatically detected platform xpu.
(EngineCore_DP0 pid=7) INFO 11-19 08:04:09 [core.py:77] Initializing a V1 LLM engine (v0.11.1) with config: model='Qwen/Qwen3-0.6B', tensor_parallel_size=1
(EngineCore_DP0 pid=7) INFO 11-19 08:04:10 [gpu_model_runner.py:2602] Starting to load model Qwen/Qwen3-0.6B...
(EngineCore_DP0 pid=7) INFO 11-19 08:04:14 [default_loader.py:267] Loading weights took 3.10 seconds
(EngineCore_DP0 pid=7) INFO 11-19 08:04:20 [kv_cache_utils.py:1087] GPU KV cache size: 100,000 tokens
Adding requests: 100%|██████████| 4/4 [00:00<00:00, 197.40it/s]
INFO 11-19 08:04:27 [logger.py:133] Default sampling parameters have been overridden
`
	r, err = Parse(strings.NewReader(offline), Options{Reference: ref})
	if err != nil {
		t.Fatal(err)
	}
	// No "Model loading took": the load ends at "Loading weights took"; no server: ready at the
	// engine's end (the KV-cache size, then the prompts).
	checkResult(t, r, want{version: "0.11.1", engine: "v1", model: "Qwen/Qwen3-0.6B", tp: 1, outcome: OutcomeReady, cache: CacheUnknown, clock: ClockVLLM,
		phases: map[string]float64{PhaseImports: 8, PhaseEngineStart: 1, PhaseWeightLoad: 4, PhaseKVCacheAndWarmup: 6, PhaseTotal: 19}}, "")
}
