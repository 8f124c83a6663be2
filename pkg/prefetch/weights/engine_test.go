package weights_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
)

func TestFetchFileSource(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	model := newFakeModel(1, 3<<20+12345, 1<<20, 777)
	model.writeDir(t, src)
	data := t.TempDir()
	e := newEngine(t, data, nil)
	var states []prefetch.State
	st, err := e.Fetch(context.Background(), fileModel("acme/tiny", src), func(s prefetch.ModelStatus) {
		if len(states) == 0 || states[len(states)-1] != s.State {
			states = append(states, s.State)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(data, "weights", "models--acme--tiny", "snapshots", "main")
	if st.SnapshotPath != want || !st.Verified("acme/tiny", "main") || st.BytesDone != model.size() {
		t.Fatalf("status %+v; want ready at %s with %d bytes", st, want, model.size())
	}
	checkSnapshot(t, st.SnapshotPath, model)
	if ref, _ := os.ReadFile(filepath.Join(data, "weights", "models--acme--tiny", "refs", "main")); string(ref) != "main" {
		t.Errorf("refs/main = %q", ref)
	}
	if got := strings.Join(toStrings(states), ","); got != "queued,downloading,verifying,ready" {
		t.Errorf("states %s", got)
	}
	for _, fv := range st.Files {
		if fv.Method != prefetch.VerifiedSize {
			t.Errorf("%s verified by %s; a file source has only sizes", fv.Name, fv.Method)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "weights", ".staging", "models--acme--tiny@main")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging left behind: %v", err)
	}
	if _, err := e.Check(fileModel("acme/tiny", src)); err != nil {
		t.Errorf("Check after publish: %v", err)
	}
}

func toStrings(s []prefetch.State) []string {
	var out []string
	for _, x := range s {
		out = append(out, string(x))
	}
	return out
}

func TestLayoutErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		mutate  func(fakeModel)
		wantErr string
	}{
		{"missing shard", func(m fakeModel) { delete(m, "model-00002-of-00002.safetensors") }, "shard model-00002-of-00002.safetensors named in model.safetensors.index.json's weight_map is missing"},
		{"missing config", func(m fakeModel) { delete(m, "config.json") }, "config.json is missing"},
		{"truncated safetensors", func(m fakeModel) {
			b := m["model-00001-of-00002.safetensors"]
			m["model-00001-of-00002.safetensors"] = b[:len(b)-100]
		}, "MetadataIncompleteBuffer"},
		{"garbage safetensors", func(m fakeModel) { m["model-00001-of-00002.safetensors"] = []byte("not a safetensors file") }, "HeaderTooLarge"},
		// The index and the shards disagree: vLLM would refuse the model at load.
		{"index names a tensor its shard lacks", func(m fakeModel) {
			m.setIndex(map[string]string{"layers.0.weight": "model-00001-of-00002.safetensors", "layers.1.weight": "model-00002-of-00002.safetensors",
				"layers.9.weight": "model-00002-of-00002.safetensors"})
		}, "1 tensor(s) its weight_map names are not in the shard it names"},
		{"index names a tensor in the wrong shard", func(m fakeModel) {
			m.setIndex(map[string]string{"layers.0.weight": "model-00002-of-00002.safetensors", "layers.1.weight": "model-00002-of-00002.safetensors"})
		}, "1 tensor(s) its weight_map names are not in the shard it names"},
		{"a shard's tensor the index does not name", func(m fakeModel) {
			m.setIndex(map[string]string{"layers.0.weight": "model-00001-of-00002.safetensors", "layers.1.weight": "model-00002-of-00002.safetensors"})
			m["model-00002-of-00002.safetensors"] = safetensors2(2, "layers.1.weight", "layers.1.bias", 3000)
		}, "1 tensor(s) in the shards it names are not named by its weight_map"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			m := newFakeModel(2, 5000, 3000)
			tc.mutate(m)
			m.writeDir(t, src)
			data := t.TempDir()
			e := newEngine(t, data, nil)
			st, err := e.Fetch(context.Background(), fileModel("acme/broken", src), nil)
			if !errors.Is(err, weights.ErrLayout) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v; want ErrLayout mentioning %q", err, tc.wantErr)
			}
			if st.State != prefetch.StateFailed || st.Reason == "" {
				t.Errorf("status %+v; want failed with a reason", st)
			}
			if _, err := os.Stat(filepath.Join(data, "weights", "models--acme--broken", "snapshots", "main")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a broken model was published: %v", err)
			}
			if ents, _ := os.ReadDir(filepath.Join(data, "weights", ".staging")); len(ents) != 0 {
				t.Errorf("staging not cleaned: %v", ents)
			}
		})
	}
}
