package security

// Class 6: values that validated but killed the daemon. Through the real binary: `warmd run` and a
// CLI command refuse each at start with exit 2, naming the field, its range and why; a running
// daemon rejects each on reload, keeps its config, and still stops within its grace; a 50 MB config
// is refused from its size with bounded memory.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// badConfigs are whole NodeConfig sections (on top of World.Config's defaults) that must be refused,
// with what the refusal must say.
var badConfigs = []struct {
	name     string
	sections map[string]string
	want     []string
}{
	{"2e9 ranged GETs", map[string]string{"weights": "{concurrency: 2000000000}"},
		[]string{"weights.concurrency: 2000000000 is outside 1..256", "each in-flight ranged GET"}},
	{"negative resolve interval", map[string]string{"imagePull": "{resolveInterval: -1h}"},
		[]string{"imagePull.resolveInterval: -1h0m0s is outside 10s..24h"}},
	{"negative resync", map[string]string{"readiness": "{disabled: true, resync: -1s}"},
		[]string{"readiness.resync: -1s is outside 10s..24h"}},
	{"negative quiet period", map[string]string{"compileCache": "{disabled: true, quietPeriod: -5m}"},
		[]string{"compileCache.quietPeriod: -5m0s is outside 1s..1h"}},
	{"relative podLogDir", map[string]string{"phases": "{podLogDir: var/log/pods}"},
		[]string{`phases.podLogDir: "var/log/pods" is not an absolute path`}},
	{"model named /", map[string]string{"models": "[{name: /, source: 's3://b/m/'}]"},
		[]string{`models[0].name: "/" the namespace is empty`}},
	{"model named .", map[string]string{"models": "[{name: ., source: 's3://b/m/'}]"},
		[]string{`models[0].name: "." the name starts or ends with '-' or '.'`}},
	{"model named org/", map[string]string{"models": "[{name: org/, source: 's3://b/m/'}]"},
		[]string{`models[0].name: "org/" the name is empty`}},
	{"model name of 300 characters", map[string]string{"models": "[{name: org/" + strings.Repeat("m", 300) + ", source: 's3://b/m/'}]"},
		[]string{"models[0].name:", "is 300 characters; the Hub allows at most 96"}},
	{"unknown field beside other problems", map[string]string{"weights": "{concurency: 4, chunkSize: 1Ki}", "phases": "{podLogDir: rel}"},
		[]string{"weights.concurency: unknown field (did you mean concurrency?)", "weights.chunkSize: 1Ki is outside 1Mi..1Gi", `phases.podLogDir: "rel" is not an absolute path`}},
}

func TestBadConfigRefusedAtStart(t *testing.T) {
	for _, tc := range badConfigs {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWorld(t)
			cfg := w.Config(tc.sections)
			d, exited := w.StartDaemonOrExit(cfg)
			if d != nil {
				t.Fatalf("warmd run started on a config that must be refused")
			}
			checkRefusal(t, "warmd run", exited.Code, exited.Stderr, tc.want)
			r := w.Warmd("prefetch", "weights", "--config", cfg, "--progress", "none")
			checkRefusal(t, "warmd prefetch weights", r.Code, r.Output(), tc.want)
			if ents, _ := os.ReadDir(filepath.Join(w.DataDir, "weights")); len(ents) > 0 {
				t.Errorf("a refused config still fetched: %v", ents)
			}
			w.Check()
		})
	}
}

func checkRefusal(t *testing.T, what string, code int, out string, want []string) {
	t.Helper()
	if code != 2 {
		t.Errorf("%s: exit %d, want 2 (bad config):\n%s", what, code, tail(out, 2000))
	}
	for _, s := range want {
		if !strings.Contains(out, s) {
			t.Errorf("%s does not say %q:\n%s", what, s, tail(out, 2000))
		}
	}
}

func TestBadConfigRejectedOnReload(t *testing.T) {
	w := NewWorld(t)
	cfg := w.Config(nil)
	good, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := w.StartDaemon(cfg)
	for i, tc := range badConfigs {
		bad, err := os.ReadFile(w.Config(tc.sections))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		waitLog(t, d, i+1, "config change rejected")
	}
	// A 50 MB file: refused from its size, without reading it.
	if err := os.WriteFile(cfg, append(good, strings.Repeat("# padding\n", 5<<20)...), 0o644); err != nil {
		t.Fatal(err)
	}
	waitLog(t, d, len(badConfigs)+1, "config change rejected")
	if !strings.Contains(d.Log(), "config file too large") {
		t.Errorf("the 50 MB reload was not refused for its size:\n%s", tail(d.Log(), 2000))
	}
	d.Weights() // still answering on the config it started with
	start := time.Now()
	d.Stop()
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("stopping took %s after the rejected reloads (grace 10s)", took)
	}
	w.Check()
}

// peakRSS runs warmd run --config cfg to its exit and returns its peak RSS in bytes, exit code and
// output.
func peakRSS(t *testing.T, w *World, cfg string) (int64, int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, peak := rssCommand(t, ctx, warmdBin, "run", "--config", cfg)
	cmd.Env = append(cmd.Env, w.Env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("warmd run --config %s did not exit within a minute:\n%s", cfg, tail(string(out), 2000))
	}
	return peak(), cmd.ProcessState.ExitCode(), string(out)
}

// waitLog waits until the daemon's log holds n occurrences of s.
func waitLog(t *testing.T, d *Daemon, n int, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(d.Log(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d× %q not in the daemon log after 30 s:\n%s", n, s, tail(d.Log(), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHugeConfigRefusedWithBoundedMemory: a 50 MB config used to cost 1.1 GB to decode. warmd run
// refuses it from its size: the process's peak memory stays far below the file's size.
func TestHugeConfigRefusedWithBoundedMemory(t *testing.T) {
	w := NewWorld(t)
	cfg := w.Config(nil)
	good, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	line := "- {name: org/m, source: 's3://b/m/'}\n"
	huge := append(good, "models:\n"+strings.Repeat(line, 50<<20/len(line))...)
	if err := os.WriteFile(cfg, huge, 0o644); err != nil {
		t.Fatal(err)
	}
	huge = nil
	// The figure (warmd's own peak, rssCommand) is compared with the same command refusing a
	// one-line mistake, so it bounds what the file's size costs, not the binary.
	small := w.Config(map[string]string{"weights": "{concurrency: -1}"})
	base, _, _ := peakRSS(t, w, small)
	peak, code, out := peakRSS(t, w, cfg)
	if code != 2 || !strings.Contains(out, "config file too large") {
		t.Fatalf("warmd run on a 50 MB config: exit %d\n%s", code, tail(out, 2000))
	}
	t.Logf("peak RSS refusing a 50 MB config: %d MiB; refusing a one-line mistake: %d MiB", peak>>20, base>>20)
	if peak-base > 32<<20 {
		t.Errorf("refusing a 50 MB config took %d MiB more memory than refusing a small one", (peak-base)>>20)
	}
	w.Check()
}
