// Package scripts_test checks the parts of the shell scripts that run without special hardware.
package scripts_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runCheck runs scripts/device-check.sh with args and extra env; it returns stdout, stderr and the
// exit status.
func runCheck(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	cmd := exec.Command(bash, append([]string{"device-check.sh"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// noGPU points the script's GPU probes at an empty root and a missing nvidia-smi, so the no-GPU path
// runs the same on a machine that has a GPU.
func noGPU(t *testing.T) []string {
	return []string{"WARMD_DEVICE_CHECK_ROOT=" + t.TempDir(), "WARMD_DEVICE_CHECK_NVIDIA_SMI=" + filepath.Join(t.TempDir(), "nvidia-smi")}
}

func TestDeviceCheckArguments(t *testing.T) {
	out, _, code := runCheck(t, nil, "--help")
	if code != 0 || !strings.Contains(out, "Usage: scripts/device-check.sh") || !strings.Contains(out, "Exit status") {
		t.Errorf("--help: exit %d, output %q", code, out)
	}
	for _, args := range [][]string{{"--bogus"}, {"--out"}, {"--bin", "--skip-compile"}, {"--python", ""}, {"--cache-only"}} {
		dir := t.TempDir()
		_, errOut, code := runCheck(t, append(noGPU(t), "OUT="+dir), args...)
		if code != 2 || !strings.Contains(errOut, args[0]) || !strings.Contains(errOut, "Usage:") {
			t.Errorf("%q: exit %d, stderr %q; want 2 naming the option, with the usage", args, code, errOut)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%q: wrote %d files before checking its arguments", args, len(entries))
		}
	}
}

// Without a GPU the script says so, writes result.txt = no-gpu, exits 3 and builds nothing.
func TestDeviceCheckNoGPU(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := runCheck(t, noGPU(t), "--out", dir, "--bin", "/nonexistent/warmd")
	if code != 3 || !strings.Contains(out, "no NVIDIA GPU here") || !strings.Contains(out, "nothing to check") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 3 and the no-GPU message", code, out, errOut)
	}
	b, err := os.ReadFile(filepath.Join(dir, "result.txt"))
	if err != nil || strings.TrimSpace(string(b)) != "no-gpu" {
		t.Errorf("result.txt = %q (%v), want no-gpu", b, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("out dir holds %d entries, want only result.txt", len(entries))
	}
}

// The capture → wipe → restore part runs on synthetic files with a real warmd built from this tree:
// the script's use of `warmd cache env/export/import` is what the GPU run relies on.
func TestDeviceCheckCacheRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("builds warmd")
	}
	bin := os.Getenv("WARMD_BIN") // a prebuilt warmd, else one built like this test binary
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "warmd")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		build := exec.CommandContext(ctx, "go", append(append([]string{"build"}, raceFlag...), "-o", bin, "./cmd/warmd")...)
		build.Dir = ".."
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build warmd: %v\n%s", err, b)
		}
	}
	// A gzipped binary, as --prepare writes it for carrying to a GPU machine, is unpacked first.
	gz := filepath.Join(t.TempDir(), "warmd-gpu.gz")
	if b, err := exec.Command("sh", "-c", `gzip -1c "$0" >"$1"`, bin, gz).CombinedOutput(); err != nil {
		t.Fatalf("gzip: %v %s", err, b)
	}
	dir := t.TempDir()
	out, errOut, code := runCheck(t, noGPU(t), "--out", dir, "--bin", gz, "--cache-only", "nvidia-h200-141gb.sm90.cuda12.8.drv570-test")
	if code != 0 || !strings.Contains(out, "cache round trip: 8 files captured, 8 restored, contents identical") ||
		!strings.Contains(out, "4 lock/temp files left out") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "cache-env.json"))
	for _, name := range []string{"VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE"} {
		if !bytes.Contains(b, []byte(name)) {
			t.Errorf("cache env lacks %s: %s", name, b)
		}
	}
	// A SKU key the cache refuses is an error, not a pass.
	_, _, code = runCheck(t, noGPU(t), "--out", t.TempDir(), "--bin", bin, "--cache-only", "none")
	if code == 0 {
		t.Errorf("--cache-only none passed; the cache must refuse the no-GPU key")
	}
}
