package follow

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"warmd.io/warmd/pkg/phases"
)

func TestRunningModelsFollowsPodLogDirs(t *testing.T) {
	dir := t.TempDir()
	seed, err := os.ReadFile("../testdata/seed-7b-warm.log")
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel string, b []byte) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("default_vllm-0_uid1/vllm/0.log", seed)
	write("default_vllm-0_uid1/sidecar/0.log", []byte("2026-11-30T21:02:11.350000000Z stdout F hello\n"))
	write("other_web_uid2/nginx/3.log", []byte("2026-11-30T21:02:11.350000000Z stdout F GET /\n"))
	write("stray-file", nil)

	got, err := RunningModels(dir, func(_, _ string, r phases.Result) string { return "cfg:" + r.Model }, 500)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cfg:Qwen/Qwen2.5-7B-Instruct"}; !reflect.DeepEqual(got, want) {
		t.Errorf("running = %v, want %v", got, want)
	}
	// The kubelet removes the pod's log dir with the pod: the model is no longer in use.
	os.RemoveAll(filepath.Join(dir, "default_vllm-0_uid1"))
	if got, _ := RunningModels(dir, nil, 500); len(got) != 0 {
		t.Errorf("after the pod left: %v", got)
	}
	if _, err := RunningModels(filepath.Join(dir, "missing"), nil, 10); err == nil {
		t.Error("a missing pod log dir gave no error")
	}
}
