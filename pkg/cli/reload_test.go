package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/prefetch"
)

// TestReloadedModelIsManaged runs `warmd run` and adds a model to its config file while it runs. The
// model is fetched; the start of a pod serving it is recorded under its name (not "unmanaged"); and,
// once its recent-use window has passed, that running pod still keeps its weights from being evicted
// for another model added later: the other model fails on the budget instead. Before the assembly
// followed reloads the naming and in-use detection kept the start-up config, so the added model's pod
// protected nothing and its weights were evicted.
func TestReloadedModelIsManaged(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 1m minimum weights.inUseWindow")
	}
	dir, err := os.MkdirTemp("", "wd") // short: unix socket paths are limited to ~104 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	const served, other = "Qwen/Qwen2.5-7B-Instruct", "org/other" // served: the model the replayed vLLM log serves
	for i, name := range []string{"served", "other"} {
		m, err := fixtures.NewModel(fixtures.ModelSpec{Shards: 1, TensorsA: 2, BytesPerTensor: 300 << 10, Seed: uint64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.WriteDir(filepath.Join(dir, "src", name)); err != nil {
			t.Fatal(err)
		}
	}
	listen := freeAddr(t)
	cfgPath := filepath.Join(dir, "c.yaml")
	// A 1 MiB budget holds one of the two ~600 KiB models, not both.
	writeCfg := func(models ...string) {
		t.Helper()
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nnodeName: n1\ndataDir: %s\napi: {listen: '%s'}\n", dir, listen)
		fmt.Fprintf(&b, "containerd: {backend: embedded}\ncompileCache: {disabled: true}\nreadiness: {disabled: true}\n")
		fmt.Fprintf(&b, "phases: {podLogDir: %s/pods}\nweights: {budget: 1Mi, inUseWindow: 1m}\nmodels:\n", dir)
		for _, m := range models {
			src := map[string]string{served: "served", other: "other"}[m]
			fmt.Fprintf(&b, "- {name: %s, source: 'file://%s/src/%s/'}\n", m, dir, src)
		}
		tmp := cfgPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfgPath); err != nil { // as a ConfigMap update swaps the file
			t.Fatal(err)
		}
	}
	writeCfg()
	os.MkdirAll(filepath.Join(dir, "pods"), 0o755)
	cmd := warmd(t, "run", "--config", cfgPath, "--grace", "10s", "--log-format", "text")
	logf, err := os.Create(filepath.Join(dir, "warmd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("warmd log:\n%s", b)
		}
	}()
	status := func() (*api.RawStatus, error) {
		out, err := warmd(t, "status", "--data-dir", dir, "-o", "json").Output()
		if err != nil {
			return nil, err
		}
		var st api.RawStatus
		return &st, json.Unmarshal(out, &st)
	}
	weightsOf := func(name string) (prefetch.ModelStatus, string) {
		st, err := status()
		if err != nil {
			return prefetch.ModelStatus{}, err.Error()
		}
		ws, _, _ := prefetch.WeightsSection.Decode(st.Sections)
		ms, _ := ws.Model(name)
		return ms, fmt.Sprintf("%+v", ws.Models)
	}
	within(t, time.Minute, "/readyz 200 once every part made its first pass", func() (bool, string) {
		code, body := get(listen, "/readyz")
		return code == http.StatusOK, fmt.Sprint(code, " ", body)
	})

	// 1. Added by an edit: fetched.
	writeCfg(served)
	within(t, time.Minute, "the added model fetched", func() (bool, string) {
		ms, all := weightsOf(served)
		return ms.State == prefetch.StateReady, all
	})
	fetched := time.Now()

	// 2. A pod serving it starts: its start is recorded under the model's name.
	podLog := filepath.Join(dir, "pods", "default_vllm-0_uid-0", "vllm", "0.log")
	os.MkdirAll(filepath.Dir(podLog), 0o755)
	b, err := os.ReadFile("../phases/testdata/seed-7b-warm.log")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(podLog, b, 0o644); err != nil {
		t.Fatal(err)
	}
	within(t, time.Minute, "the start recorded under the model's name", func() (bool, string) {
		st, err := status()
		if err != nil {
			return false, err.Error()
		}
		ph, _, _ := phases.Section.Decode(st.Sections)
		if len(ph.Records) == 0 {
			return false, "no record yet"
		}
		return ph.Records[0].Model == served, "recorded as " + ph.Records[0].Model
	})

	// 3. Past the recent-use window only the running pod protects the weights: another model that
	// does not fit beside them fails on the budget, naming them, and they stay.
	time.Sleep(time.Until(fetched.Add(65 * time.Second)))
	writeCfg(served, other)
	within(t, time.Minute, "the other model refused by the budget", func() (bool, string) {
		ms, all := weightsOf(other)
		return ms.State == prefetch.StateFailed && strings.Contains(ms.Reason, served), all
	})
	ms, all := weightsOf(served)
	if ms.State != prefetch.StateReady {
		t.Fatalf("the served model after the other was added: %s", all)
	}
	if _, err := os.Stat(filepath.Join(ms.SnapshotPath, "config.json")); err != nil {
		t.Errorf("the served model's files were evicted: %v", err)
	}
}

// freeAddr returns a free local TCP address for the daemon's /metrics, /healthz and /readyz.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// within polls cond until it holds or timeout passes; what names what is awaited.
func within(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
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
