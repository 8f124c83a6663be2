package phases

import (
	"os"
	"strings"
	"testing"
	"time"
)

// One start in many wrappers: every one must yield the same version, model and weight-load phase.
func TestWrappers(t *testing.T) {
	lines := []string{
		"INFO 11-30 21:00:00 [api_server.py:1] vLLM API server version 0.9.2",
		"INFO 11-30 21:00:05 [core.py:69] Initializing a V1 LLM engine (v0.9.2) with config: model='m/x', tensor_parallel_size=1",
		"INFO 11-30 21:00:10 [gpu_model_runner.py:1] Starting to load model m/x...",
		"INFO 11-30 21:00:17 [gpu_model_runner.py:2] Model loading took 1.0 GiB and 7.000000 seconds",
	}
	base := time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)
	at := []time.Duration{0, 5 * time.Second, 10 * time.Second, 17 * time.Second}
	wrap := map[string]func(i int, s string) string{
		"raw": func(_ int, s string) string { return s },
		"cri": func(i int, s string) string {
			return base.Add(at[i]+250*time.Millisecond).Format(time.RFC3339Nano) + " stdout F " + s
		},
		"kubectl": func(i int, s string) string {
			return base.Add(at[i]).Format(time.RFC3339Nano) + " " + s
		},
		"collector": func(i int, s string) string {
			return base.Add(at[i]).Format("2006-01-02 15:04:05.000") + " | " + s
		},
		"journald": func(i int, s string) string {
			return base.Add(at[i]).Format("2006-01-02T15:04:05.000000-0700") + " node-1 vllm[42]: " + s
		},
		"syslog": func(i int, s string) string {
			return base.Add(at[i]).Format("Jan _2 15:04:05") + " node-1 vllm[42]: " + s
		},
		"ansi+prefix": func(_ int, s string) string { return "\x1b[1;36m(EngineCore_DP0 pid=7)\x1b[0;0m " + s },
		"logging-prefix": func(_ int, s string) string {
			return "[vllm] " + s // VLLM_LOGGING_PREFIX
		},
		"crlf": func(_ int, s string) string { return s + "\r" },
		// merging tools and CI runners (kubectl logs --prefix [--timestamps], docker compose logs,
		// Buildkite's "[RFC 3339] ")
		"kubectl-prefix": func(_ int, s string) string { return "[pod/vllm-0/vllm] " + s },
		"kubectl-prefix+timestamps": func(i int, s string) string {
			return "[pod/vllm-0/vllm] " + base.Add(at[i]).Format(time.RFC3339Nano) + " " + s
		},
		"compose":     func(_ int, s string) string { return "qwen3.5-9b  | (EngineCore_DP0 pid=132) " + s },
		"bracket-iso": func(i int, s string) string { return "[" + base.Add(at[i]).Format(time.RFC3339) + "] " + s },
	}
	for name, f := range wrap {
		t.Run(name, func(t *testing.T) {
			var in []string
			for i, l := range lines {
				in = append(in, f(i, l))
			}
			r, err := Parse(strings.NewReader(strings.Join(in, "\n")), Options{Reference: ref})
			if err != nil {
				t.Fatal(err)
			}
			if r.VLLMVersion != "0.9.2" || r.Model != "m/x" || r.Engine != "v1" {
				t.Errorf("got version %q model %q engine %q", r.VLLMVersion, r.Model, r.Engine)
			}
			if got, ok := r.Phase(PhaseWeightLoad); !ok || got < 6.99 || got > 7.01 {
				t.Errorf("weight_load = %v (%v), want 7", got, ok)
			}
			if r.StartedAt.Year() != 2026 {
				t.Errorf("started at %v, want year 2026", r.StartedAt)
			}
		})
	}
}

func TestCRIPartialLines(t *testing.T) {
	log := strings.Join([]string{
		"2026-11-30T21:00:00.100000000Z stdout P INFO 11-30 21:00:00 [core.py:69] Initializing a V1 LLM engine (v0.9.2) with config: model='m/",
		"2026-11-30T21:00:00.150000000Z stderr F Loading safetensors checkpoint shards:   0% Completed | 0/1",
		"2026-11-30T21:00:00.200000000Z stdout P long-",
		"2026-11-30T21:00:00.300000000Z stdout F name', tensor_parallel_size=8",
		"2026-11-30T21:00:02.000000000Z stdout F INFO 11-30 21:00:02 [gpu_model_runner.py:1] Starting to load model m/long-name...",
	}, "\n")
	r, err := Parse(strings.NewReader(log), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "m/long-name" || r.TensorParallelSize != 8 {
		t.Fatalf("joined line lost: model %q tp %d", r.Model, r.TensorParallelSize)
	}
	// The joined line takes its first fragment's time.
	if got, ok := r.Phase(PhaseEngineStart); !ok || got < 1.899 || got > 1.901 {
		t.Errorf("engine_start = %v, want 1.9", got)
	}
}

func TestYearInference(t *testing.T) {
	tests := []struct {
		name     string
		ref      time.Time
		line     string
		wantYear int
	}{
		{"same year", time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), "INFO 05-31 10:00:00 [x.py:1] Starting to load model a...", 2026},
		{"log from last December read in January", time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC), "INFO 12-31 23:00:00 [x.py:1] Starting to load model a...", 2026},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := Parse(strings.NewReader(tc.line), Options{Reference: tc.ref})
			if r.StartedAt.Year() != tc.wantYear {
				t.Errorf("year %d, want %d", r.StartedAt.Year(), tc.wantYear)
			}
		})
	}
	// Without a reference no absolute time is claimed.
	r, _ := Parse(strings.NewReader("INFO 05-31 10:00:00 [x.py:1] Starting to load model a..."), Options{})
	if !r.StartedAt.IsZero() {
		t.Errorf("StartedAt = %v without a reference, want zero", r.StartedAt)
	}
}

func TestOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		log     string
		outcome Outcome
		err     string
	}{
		{"log just ends", "INFO 01-01 00:00:00 [x.py:1] Starting to load model a...", OutcomeIncomplete, ""},
		{"uvicorn startup complete", "INFO 01-01 00:00:00 [x.py:1] Starting to load model a...\nINFO:     Application startup complete.", OutcomeReady, ""},
		{"ERROR line alone is not a failure", "ERROR 01-01 00:00:00 [x.py:1] something odd", OutcomeIncomplete, ""},
		{"CUDA OOM", "Traceback (most recent call last):\n  File \"x.py\", line 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", OutcomeFailed, "torch.OutOfMemoryError: CUDA out of memory."},
		{"engine died without traceback", "ERROR 01-01 00:00:00 [core.py:1] Engine core initialization failed. See root cause above.", OutcomeFailed, "Engine core initialization failed."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := Parse(strings.NewReader(tc.log), Options{})
			if r.Outcome != tc.outcome || !strings.HasPrefix(r.Error, tc.err) {
				t.Errorf("outcome %s error %q, want %s %q", r.Outcome, r.Error, tc.outcome, tc.err)
			}
		})
	}
}

// What the node knows beyond the log: the container start makes imports longer, the kubelet's pull
// adds an image_pull phase and moves the waterfall's origin; nothing else changes.
func TestContainerStartAndImagePull(t *testing.T) {
	first := time.Date(2026, 11, 30, 21, 2, 11, 350_000_000, time.UTC) // seed-7b-cold.log's first line
	base := parseFile(t, "seed-7b-cold.log")
	f, err := os.Open("testdata/seed-7b-cold.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := Parse(f, Options{Start: first.Add(-2 * time.Second), PullStart: first.Add(-50 * time.Second), PullEnd: first.Add(-4 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Phases[0].Name != PhaseImagePull || r.Phases[0].Start != 0 || r.Phases[0].Seconds != 46 {
		t.Errorf("image_pull = %+v, want start 0, 46 s", r.Phases[0])
	}
	imp, _ := r.Phase(PhaseImports)
	baseImp, _ := base.Phase(PhaseImports)
	if d := imp - baseImp; d < 1.999 || d > 2.001 {
		t.Errorf("imports %.3f s, want 2 s more than from the log alone (%.3f)", imp, baseImp)
	}
	if d := *r.TotalSeconds - *base.TotalSeconds; d < 49.999 || d > 50.001 {
		t.Errorf("total %.3f, want the log's %.3f + 50 s", *r.TotalSeconds, *base.TotalSeconds)
	}
	if !r.StartedAt.Equal(first.Add(-2 * time.Second)) {
		t.Errorf("StartedAt %v, want the container start", r.StartedAt)
	}
	// A pull that ends after the process started is not this start's pull: ignored, not bent to fit.
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	bad, _ := Parse(f, Options{PullStart: first.Add(-time.Second), PullEnd: first.Add(time.Second)})
	if _, ok := bad.Phase(PhaseImagePull); ok || *bad.TotalSeconds != *base.TotalSeconds {
		t.Errorf("a pull overlapping the process was used: %+v", bad.Phases[0])
	}
}
