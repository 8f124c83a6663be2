package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as the warmd binary: with WARMD_TEST_MAIN=1 it runs Main with the
// given arguments, as cmd/warmd's main does, so the tests below check real exit codes, signals and
// files, not a function.
func TestMain(m *testing.M) {
	if os.Getenv("WARMD_TEST_MAIN") == "1" {
		os.Args = append([]string{"warmd"}, strings.Fields(os.Getenv("WARMD_TEST_ARGS"))...)
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

func warmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WARMD_TEST_MAIN=1", "WARMD_TEST_ARGS="+strings.Join(args, " "))
	return cmd
}

func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestRunBadConfigListsEveryMistake(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(`apiVersion: warmd.io/v1alpha1
kind: NodeConfig
dataDir: var/lib/warmd
models:
- name: Qwen/Qwen2.5-7B
  source: s4://x
imagePull:
  onRemove: delete
`), 0o644)
	var stderr bytes.Buffer
	cmd := warmd(t, "run", "--config", bad)
	cmd.Stderr = &stderr
	err := cmd.Run()
	if code := exitCodeOf(err); code != 2 {
		t.Fatalf("exit code %d, want 2; stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"dataDir:", "models[0].source:", "scheme must be s3 or file", "imagePull.onRemove:"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// startDaemon runs `warmd run` on a minimal config (embedded images, no caches, no API server) in a
// short temp dir, which it returns with the process and its stderr.
func startDaemon(t *testing.T) (string, *exec.Cmd, *bytes.Buffer) {
	t.Helper()
	dir, err := os.MkdirTemp("", "wd") // short: unix socket paths are limited to ~104 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nnodeName: n1\ndataDir: "+dir+
		"\napi: {listen: 127.0.0.1:0}\ncontainerd: {backend: embedded}\ncompileCache: {disabled: true}\nreadiness: {disabled: true}\nphases: {podLogDir: "+dir+"/pods}\n"), 0o644)
	stderr := &bytes.Buffer{}
	cmd := warmd(t, "run", "--config", cfg, "--grace", "10s")
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return dir, cmd, stderr
}

func TestRunStopsOnSIGTERMAndRemovesSocket(t *testing.T) {
	dir, cmd, stderr := startDaemon(t)
	sock := filepath.Join(dir, "warmd.sock")
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := warmd(t, "status", "--data-dir", dir).Output()
		if err == nil && strings.Contains(string(out), "Node:    n1") {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("daemon never answered status: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if code := exitCodeOf(err); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, stderr.String())
	}
	t.Logf("stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
}

func TestStatusWithoutDaemon(t *testing.T) {
	var stderr bytes.Buffer
	cmd := warmd(t, "status", "--data-dir", t.TempDir())
	cmd.Stderr = &stderr
	err := cmd.Run()
	if exitCodeOf(err) == 0 {
		t.Fatal("status succeeded with no daemon")
	}
	if !strings.Contains(stderr.String(), "warmd is not running") || !strings.Contains(stderr.String(), "warmd run --config") {
		t.Errorf("stderr lacks the reason and the hint:\n%s", stderr.String())
	}
}

func TestHelpShowsExamples(t *testing.T) {
	for _, sub := range []string{"run", "status", "version"} {
		out, err := warmd(t, sub, "--help").Output()
		if err != nil {
			t.Fatalf("%s --help: %v", sub, err)
		}
		if !strings.Contains(string(out), "Examples:") || !strings.Contains(string(out), "warmd "+sub) {
			t.Errorf("%s --help has no example:\n%s", sub, out)
		}
	}
}
