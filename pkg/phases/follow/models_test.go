package follow

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/phases"
)

// TestModelsFollowReload: a model added by a reload is named in starts (not "unmanaged") and counts
// as in use while a pod serves it, at once (the running pods' cache is dropped on reload).
func TestModelsFollowReload(t *testing.T) {
	pods := t.TempDir()
	log := filepath.Join(pods, "default_vllm-0_uid-0", "vllm", "0.log")
	os.MkdirAll(filepath.Dir(log), 0o755)
	b, err := os.ReadFile("../testdata/seed-7b-warm.log") // serves Qwen/Qwen2.5-7B-Instruct
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(log, b, 0o644)
	const served = "Qwen/Qwen2.5-7B-Instruct"
	cfg := &config.NodeConfig{Phases: config.Phases{PodLogDir: pods}, Models: []config.Model{{Name: "org/other"}}}
	m := NewModels(cfg, nil)
	if got := m.Name("", "", phases.Result{Model: served}); got != Unmanaged {
		t.Errorf("before the reload: %q, want %q", got, Unmanaged)
	}
	if m.InUse(served) || len(m.Running()) != 0 {
		t.Errorf("before the reload: running %v", m.Running())
	}
	next := *cfg
	next.Models = append(slices.Clone(cfg.Models), config.Model{Name: served})
	m.Reconfigure(&next)
	for _, printed := range []string{served, "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/main", "/models/Qwen2.5-7B-Instruct"} {
		if got := m.Name("", "", phases.Result{Model: printed}); got != served {
			t.Errorf("after the reload, %q is named %q, want %q", printed, got, served)
		}
	}
	if !m.InUse(served) {
		t.Errorf("after the reload the running pod's model is not in use: %v", m.Running())
	}
}
