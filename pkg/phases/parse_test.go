package phases

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ref is the fixed "file written at" time for year-less fixtures.
var ref = time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)

func parseFile(t *testing.T, name string) Result {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := Parse(f, Options{Source: name, Reference: ref})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

type want struct {
	version, engine, model, err string
	tp                          int
	outcome                     Outcome
	cache                       CompileCache
	hash                        string
	phases                      map[string]float64 // name → seconds (±0.01); names not listed must be absent
	reported                    []string           // reported keys that must be present (all others absent)
	clock                       string
}

func TestParseFixtures(t *testing.T) {
	tests := []struct {
		file string
		want want
	}{
		{"seed-7b-cold.log", want{version: "0.10.2", engine: "v1", model: "Qwen/Qwen2.5-7B-Instruct", tp: 1, outcome: OutcomeReady, cache: CacheMiss, hash: "3ac1b9c47e", clock: ClockCRI,
			phases:   map[string]float64{PhaseImports: 13.85, PhaseEngineStart: 9.4, PhaseWeightLoad: 28.6, PhaseTorchCompile: 61.8, PhaseKVCacheAndWarmup: 35.6, PhaseGraphCapture: 40.6, PhaseServerUp: 3.6, PhaseFirstHealth: 2.7, PhaseTotal: 196.15},
			reported: []string{"weights_load_seconds", "model_load_seconds", "dynamo_transform_seconds", "torch_compile_seconds", "graph_capture_seconds", "init_engine_seconds"}}},
		{"seed-7b-warm.log", want{version: "0.10.2", engine: "v1", tp: 1, outcome: OutcomeReady, cache: CacheHit, hash: "3ac1b9c47e", clock: ClockCRI,
			phases:   map[string]float64{PhaseImports: 11.65, PhaseEngineStart: 8.1, PhaseWeightLoad: 9.3, PhaseTorchCompile: 6.4, PhaseKVCacheAndWarmup: 8.0, PhaseGraphCapture: 19.4, PhaseServerUp: 1.8, PhaseFirstHealth: 1.9, PhaseTotal: 66.55},
			reported: []string{"weights_load_seconds", "model_load_seconds", "dynamo_transform_seconds", "torch_compile_seconds", "graph_capture_seconds", "init_engine_seconds"}}},
		{"v0.5.3-v0.log", want{version: "0.5.3", engine: "v0", model: "facebook/opt-125m", tp: 1, outcome: OutcomeReady, cache: CacheDisabled, clock: ClockVLLM,
			// "Loading model weights took 0.2389 GB" is memory: no model_load_seconds.
			phases:   map[string]float64{PhaseImports: 2, PhaseEngineStart: 3, PhaseWeightLoad: 3, PhaseKVCacheAndWarmup: 3, PhaseGraphCapture: 5, PhaseServerUp: 0, PhaseTotal: 16},
			reported: []string{"graph_capture_seconds"}}},
		{"v0.6.5-v0.log", want{version: "0.6.5", engine: "v0", tp: 1, outcome: OutcomeReady, cache: CacheDisabled, clock: ClockVLLM,
			phases:   map[string]float64{PhaseImports: 5, PhaseEngineStart: 3, PhaseWeightLoad: 13, PhaseKVCacheAndWarmup: 4, PhaseGraphCapture: 12, PhaseServerUp: 0, PhaseTotal: 37},
			reported: []string{"graph_capture_seconds", "init_engine_seconds"}}},
		{"v0.7.3-v0-tp2.log", want{version: "0.7.3", engine: "v0", tp: 2, outcome: OutcomeReady, cache: CacheDisabled, clock: ClockVLLM,
			phases:   map[string]float64{PhaseImports: 5, PhaseEngineStart: 6, PhaseWeightLoad: 9, PhaseKVCacheAndWarmup: 5, PhaseGraphCapture: 18, PhaseServerUp: 2, PhaseTotal: 45},
			reported: []string{"graph_capture_seconds", "init_engine_seconds"}}},
		{"v0.8.2-v1-tp2.log", want{version: "0.8.2", engine: "v1", tp: 2, outcome: OutcomeReady, cache: CacheMiss, hash: "9b1f0c7d2e", clock: ClockKubectl,
			phases:   map[string]float64{PhaseImports: 9.6, PhaseEngineStart: 6.5, PhaseWeightLoad: 8.7, PhaseTorchCompile: 27.9, PhaseKVCacheAndWarmup: 3.5, PhaseGraphCapture: 17.6, PhaseServerUp: 1.2, PhaseTotal: 75.0},
			reported: []string{"weights_load_seconds", "model_load_seconds", "dynamo_transform_seconds", "torch_compile_seconds", "graph_capture_seconds", "init_engine_seconds"}}},
		{"v0.9.0.1-v1-hit.log", want{version: "0.9.0.1", engine: "v1", model: "Qwen/Qwen3-8B", tp: 1, outcome: OutcomeReady, cache: CacheHit, hash: "51e8b0a2c4", clock: ClockVLLM,
			phases:   map[string]float64{PhaseImports: 9, PhaseEngineStart: 8, PhaseWeightLoad: 6, PhaseTorchCompile: 7, PhaseKVCacheAndWarmup: 1, PhaseGraphCapture: 18, PhaseServerUp: 1, PhaseTotal: 50},
			reported: []string{"weights_load_seconds", "model_load_seconds", "dynamo_transform_seconds", "torch_compile_seconds", "graph_capture_seconds", "init_engine_seconds"}}},
		{"v0.10.1-v1-download.log", want{version: "0.10.1", engine: "v1", model: "microsoft/Phi-3.5-mini-instruct", tp: 1, outcome: OutcomeReady, cache: CacheMiss, hash: "0d4f6a2b91", clock: ClockCRI,
			phases:   map[string]float64{PhaseImports: 6.5, PhaseEngineStart: 6, PhaseWeightsDownload: 43.2, PhaseWeightLoad: 4.1, PhaseTorchCompile: 23.3, PhaseKVCacheAndWarmup: 2.0, PhaseGraphCapture: 14.2, PhaseServerUp: 1.4, PhaseTotal: 100.7},
			reported: []string{"weights_download_seconds", "weights_load_seconds", "model_load_seconds", "dynamo_transform_seconds", "torch_compile_seconds", "graph_capture_seconds", "init_engine_seconds"}}},
		{"v0.11.0-v1-tp4.log", want{version: "0.11.0", engine: "v1", tp: 4, outcome: OutcomeReady, cache: CacheMiss, hash: "c0ffee1234", clock: ClockCRI,
			// slowest rank: load starts at the last "Starting to load" (25.6) and ends at rank 2's 62.8
			phases:   map[string]float64{PhaseImports: 6, PhaseEngineStart: 13.6, PhaseWeightLoad: 37.2, PhaseTorchCompile: 37.3, PhaseKVCacheAndWarmup: 3.2, PhaseGraphCapture: 23.2, PhaseServerUp: 1.7, PhaseTotal: 122.2},
			reported: []string{"weights_load_seconds", "model_load_seconds", "dynamo_transform_seconds", "torch_compile_seconds", "graph_capture_seconds", "init_engine_seconds"}}},
		{"main-2025-12-compile-range.log", want{version: "0.12.1.dev88+g4e26d3b09", engine: "v1", tp: 1, outcome: OutcomeReady, cache: CacheMiss, hash: "e41ab07c53", clock: ClockCollector,
			phases:   map[string]float64{PhaseImports: 5.3, PhaseEngineStart: 4.8, PhaseWeightLoad: 3.7, PhaseTorchCompile: 17.2, PhaseKVCacheAndWarmup: 1.7, PhaseGraphCapture: 10.5, PhaseServerUp: 1.4, PhaseTotal: 44.6},
			reported: []string{"weights_load_seconds", "model_load_seconds", "dynamo_transform_seconds", "torch_compile_seconds", "graph_capture_seconds", "init_engine_seconds"}}},
		{"main-2026-01-banner-eager.log", want{version: "0.14.1", engine: "v1", model: "google/gemma-3-12b-it", tp: 1, outcome: OutcomeReady, cache: CacheDisabled, clock: ClockCRI,
			phases:   map[string]float64{PhaseImports: 5, PhaseEngineStart: 5.5, PhaseWeightLoad: 7.7, PhaseKVCacheAndWarmup: 3.2, PhaseServerUp: 1.1, PhaseTotal: 22.5},
			reported: []string{"weights_load_seconds", "model_load_seconds", "init_engine_seconds"}}},
		{"main-2026-04-aot-hit.log", want{version: "0.19.0", engine: "v1", model: "meta-llama/Llama-3.1-8B-Instruct", tp: 1, outcome: OutcomeReady, cache: CacheHit, hash: "7f3c9a0e5b2d4c6e8a1b3d5f7092e4c6b8a0d2f4e6c8b0a2d4f6e8c0b2a4d6f8", clock: ClockJournald,
			phases:   map[string]float64{PhaseImports: 5, PhaseEngineStart: 5, PhaseWeightLoad: 4.9, PhaseTorchCompile: 3.2, PhaseKVCacheAndWarmup: 1.7, PhaseGraphCapture: 5.4, PhaseServerUp: 0.9, PhaseTotal: 26.1},
			reported: []string{"weights_load_seconds", "model_load_seconds", "torch_compile_seconds", "graph_capture_seconds", "init_engine_seconds"}}},
		{"head-2026-08-logo.log", want{version: "0.24.2", engine: "v1", model: "Qwen/Qwen3-30B-A3B", tp: 1, outcome: OutcomeReady, cache: CacheMiss, hash: "a90c3e71d2", clock: ClockCRI,
			phases:   map[string]float64{PhaseImports: 5, PhaseEngineStart: 5, PhaseWeightLoad: 24.5, PhaseTorchCompile: 34.7, PhaseKVCacheAndWarmup: 9.1, PhaseGraphCapture: 12.2, PhaseServerUp: 1.1, PhaseTotal: 91.6},
			reported: []string{"weights_load_seconds", "model_load_seconds", "dynamo_transform_seconds", "torch_compile_seconds", "graph_capture_seconds", "init_engine_seconds"}}},
		{"crash-before-compile.log", want{version: "0.10.1.1", engine: "v1", tp: 1, outcome: OutcomeFailed, cache: CacheUnknown, clock: ClockCRI,
			err:    "FileNotFoundError: Weight files referenced in index but missing",
			phases: map[string]float64{PhaseImports: 5, PhaseEngineStart: 5, PhaseTotal: 11}}},
		{"oom-kv-sizing.log", want{version: "0.11.1", engine: "v1", tp: 1, outcome: OutcomeFailed, cache: CacheMiss, hash: "77aa88bb99", clock: ClockCRI,
			err:      "ValueError: No available memory for the cache blocks",
			phases:   map[string]float64{PhaseImports: 5, PhaseEngineStart: 5, PhaseWeightLoad: 80, PhaseTorchCompile: 36, PhaseTotal: 128},
			reported: []string{"model_load_seconds", "torch_compile_seconds"}}},
		{"day-rollover.log", want{version: "0.9.2", engine: "v1", tp: 1, outcome: OutcomeReady, cache: CacheHit, clock: ClockVLLM,
			phases:   map[string]float64{PhaseImports: 8, PhaseEngineStart: 6, PhaseWeightLoad: 19, PhaseTorchCompile: 4, PhaseKVCacheAndWarmup: 2, PhaseGraphCapture: 16, PhaseServerUp: 1, PhaseTotal: 56},
			reported: []string{"model_load_seconds", "torch_compile_seconds", "graph_capture_seconds", "init_engine_seconds"}}},
		// No engine config and no "Model loading took": imports and engine start stay unknown (no line
		// splits them); weight load ends at "Loading weights took", compile starts there (stages.go).
		{"missing-lines.log", want{outcome: OutcomeIncomplete, cache: CacheUnknown, model: "Qwen/Qwen3-8B", clock: ClockCRI,
			phases:   map[string]float64{PhaseWeightLoad: 4, PhaseTorchCompile: 22},
			reported: []string{"weights_load_seconds", "dynamo_transform_seconds", "torch_compile_seconds"}}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			r := parseFile(t, tc.file)
			w := tc.want
			checkResult(t, r, w, w.err)
			b, err := r.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"weights_download_seconds", "weights_load_seconds", "model_load_seconds",
				"dynamo_transform_seconds", "torch_compile_seconds", "graph_capture_seconds", "init_engine_seconds"} {
				want := false
				for _, k := range w.reported {
					want = want || k == key
				}
				if got := bytes.Contains(b, []byte(`"`+key+`"`)); got != want {
					t.Errorf("reported %s present=%v, want %v", key, got, want)
				}
			}
		})
	}
}
