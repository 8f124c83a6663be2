package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/nvml"
)

var goldenTime = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// runGPU runs `warmd gpu args…` in-process over det and returns stdout and the exit code.
func runGPU(t *testing.T, det nvml.Detector, args ...string) (string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	s := IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	root := NewRootCommand(s)
	for i, c := range root.Commands() {
		if c.Name() == "gpu" {
			root.RemoveCommand(root.Commands()[i])
			break
		}
	}
	root.AddCommand(newGPUCommandWith(s, gpuOptions{detector: det, now: func() time.Time { return goldenTime }}))
	root.SetArgs(append([]string{"gpu"}, args...))
	code := exitCode(root.ExecuteContext(context.Background()), nil)
	return out.String(), code
}

// TestGPUThisMachine runs the real binary: on a machine without an NVIDIA GPU it must say so and exit 0.
func TestGPUThisMachine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := warmd(t, "gpu")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if strings.Contains(stdout.String(), "GPU: none") {
		if code := exitCodeOf(err); code != 0 || !strings.Contains(stdout.String(), nvml.NoGPUReason) ||
			!strings.Contains(stdout.String(), "SKU key: none") {
			t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		}
		return
	}
	t.Logf("this machine has GPUs:\n%s", stdout.String())
	if !strings.Contains(stdout.String(), "SKU key: ") {
		t.Errorf("no SKU key printed:\n%s", stdout.String())
	}
}

func TestGPUNullGolden(t *testing.T) {
	for _, format := range []string{"table", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			out, code := runGPU(t, nvml.Null{}, "-o", format)
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			golden(t, "gpu/none."+format, []byte(out))
		})
	}
	if _, code := runGPU(t, nvml.Null{}, "-o", "xml"); code != 2 {
		t.Errorf("bad -o exit %d, want 2", code)
	}
}

// TestRunPublishesGPUSection starts the daemon and reads the gpu section back through `warmd status`.
func TestRunPublishesGPUSection(t *testing.T) {
	dir, cmd, stderr := startDaemon(t)
	defer cmd.Process.Kill()
	var raw struct {
		Sections struct {
			GPU *nvml.Status `json:"gpu"`
		} `json:"sections"`
	}
	deadline := time.Now().Add(20 * time.Second)
	for raw.Sections.GPU == nil {
		out, err := warmd(t, "status", "--data-dir", dir, "-o", "json").Output()
		if err == nil {
			if err := json.Unmarshal(out, &raw); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no gpu section: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	g := raw.Sections.GPU
	if g.Detections < 1 || g.Labels[nodelabels.LabelSKU] != g.Inventory.SKU || g.Inventory.SKU == "" {
		t.Errorf("gpu section %+v", g)
	}
	table, err := warmd(t, "status", "--data-dir", dir).Output()
	if err != nil || !strings.Contains(string(table), "GPU:") || !strings.Contains(string(table), "SKU "+g.Inventory.SKU) {
		t.Errorf("status table lacks the GPU section (%v):\n%s", err, table)
	}
}
