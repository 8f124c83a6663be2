package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warmd.io/warmd/internal/testenv"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/state"
)

// warmdBin is the warmd binary TestMain builds from this checkout: the e2e runs the real program,
// as the DaemonSet does, not functions.
var warmdBin string

func TestMain(m *testing.M) { testenv.MainWithWarmd(m, &warmdBin, "") }

// node is one simulated GPU node: its own data dir, pod-log dir, containerd and `warmd run` process.
type node struct {
	t       *testing.T
	name    string
	dataDir string
	podLogs string
	config  string
	env     []string
	cmd     *exec.Cmd
	log     *os.File
}

func (n *node) socket() string { return filepath.Join(n.dataDir, "warmd.sock") }

// start runs `warmd run` for the node.
func (n *node) start() {
	n.t.Helper()
	f, err := os.OpenFile(filepath.Join(n.dataDir, "..", n.name+"-warmd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	n.log = f
	cmd := exec.Command(warmdBin, "run", "--config", n.config, "--log-format", "text", "--grace", "15s")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), n.env...)
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("start warmd on %s: %v", n.name, err)
	}
	n.cmd = cmd
}

// stop ends the daemon with sig and waits; with SIGTERM it must exit 0.
func (n *node) stop(sig syscall.Signal) {
	n.t.Helper()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(sig)
	err := n.cmd.Wait()
	n.cmd = nil
	n.log.Close()
	if sig == syscall.SIGTERM && err != nil {
		n.t.Errorf("warmd on %s exited with %v after SIGTERM; log:\n%s", n.name, err, n.logTail())
	}
}

func (n *node) logTail() string {
	b, _ := os.ReadFile(filepath.Join(n.dataDir, "..", n.name+"-warmd.log"))
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// status reads /v1/status through the real CLI (`warmd status -o json`), as an operator's script would.
func (n *node) status() (*api.RawStatus, error) {
	out, err := exec.Command(warmdBin, "status", "--data-dir", n.dataDir, "-o", "json").Output()
	if err != nil {
		return nil, err
	}
	var st api.RawStatus
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("decode warmd status -o json: %w", err)
	}
	return &st, nil
}

// section decodes one section of the status, failing the test on a decode error.
func section[T any](t *testing.T, st *api.RawStatus, k state.Key[T]) (T, bool) {
	t.Helper()
	v, ok, err := k.Decode(st.Sections)
	if err != nil {
		t.Fatal(err)
	}
	return v, ok
}

// human returns `warmd status` as people see it.
func (n *node) human() string {
	out, _ := exec.Command(warmdBin, "status", "--data-dir", n.dataDir).CombinedOutput()
	return string(out)
}

// eventually polls cond until it is true or timeout passes; what describes what is awaited.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
}

// cacheEnv asks `warmd cache env` for the pod env and volume of the node, and maps each env value
// from the container's mount path to the node's host path, as the kubelet's hostPath mount would.
func (n *node) cacheEnv(model string) map[string]string {
	n.t.Helper()
	out, err := exec.Command(warmdBin, "cache", "env", "--data-dir", n.dataDir, "--model", model, "-o", "json").Output()
	if err != nil {
		n.t.Fatalf("warmd cache env: %v", err)
	}
	var spec struct {
		Env          []struct{ Name, Value string }
		VolumeMounts []struct {
			MountPath string `json:"mountPath"`
		} `json:"volumeMounts"`
		Volumes []struct {
			HostPath struct{ Path string } `json:"hostPath"`
		}
	}
	if err := json.Unmarshal(out, &spec); err != nil || len(spec.VolumeMounts) != 1 || len(spec.Volumes) != 1 {
		n.t.Fatalf("warmd cache env output: %v\n%s", err, out)
	}
	env := map[string]string{}
	for _, e := range spec.Env {
		env[e.Name] = strings.Replace(e.Value, spec.VolumeMounts[0].MountPath, spec.Volumes[0].HostPath.Path, 1)
	}
	return env
}

func run(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, warmdBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
