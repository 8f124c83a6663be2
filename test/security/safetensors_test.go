package security

// Class 8: models published as "ready" although no safetensors loader accepts them (issue 25 item 7
// among them: an index that disagrees with its shards). Each case serves a model whose one defect is
// in a file's content (from the hostile stub, which serves any bytes) and
// asserts, through `warmd run` and through `warmd prefetch weights`, that the model fails with the
// rule it breaks, is not published, and that nothing outside the data dir changed.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/pkg/prefetch"
)

// safetensorsFile is a hand-written header and a data buffer of n zero bytes.
var safetensorsFile = fixtures.RawSafetensors

func TestUnloadableModelsAreNotReady(t *testing.T) {
	const goodConfig = `{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}`
	tests := []struct {
		name        string
		config      string
		safetensors []byte
		// shards, when set, replace model.safetensors: an index and the shards it names.
		shards map[string][]byte
		rule   string
	}{
		{"overlapping data_offsets", goodConfig, safetensorsFile(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}`, 12), nil, "InvalidOffset"},
		{"dtype x shape larger than the span", goodConfig, safetensorsFile(`{"w":{"dtype":"F32","shape":[1024],"data_offsets":[0,16]}}`, 16), nil, "TensorInvalidInfo"},
		{"bytes no tensor covers", goodConfig, safetensorsFile(`{"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, 4096), nil, "MetadataIncompleteBuffer"},
		{"non-object __metadata__", goodConfig, safetensorsFile(`{"__metadata__":["pt"],"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, 16), nil, "__metadata__ is not a string-to-string map"},
		{"empty config.json", "", safetensorsFile(`{"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, 16), nil, "config.json: is empty"},
		// An index that disagrees with its shards: vLLM and transformers load by the weight_map and
		// refuse the model at start (a tensor not where the map says, or one the map leaves out).
		{"index names a tensor its shards lack", goodConfig, nil,
			sharded(`{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}`, onlyB, 16),
			"not in the shard it names"},
		{"index names a tensor in the wrong shard", goodConfig, nil,
			sharded(`{"a":"model-00002-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}`, onlyB, 16), "not in the shard it names"},
		{"a shard's tensor the index does not name", goodConfig, nil,
			sharded(`{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}`,
				`{"b":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},"d":{"dtype":"U8","shape":[16],"data_offsets":[16,32]}}`, 32),
			"not named by its weight_map"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := StubBucket(t)
			files := map[string][]byte{"config.json": []byte(tc.config)}
			if tc.shards == nil {
				files["model.safetensors"] = tc.safetensors
			}
			for n, data := range tc.shards {
				files[n] = data
			}
			b.PutModel("m/", files)
			w := NewWorld(t)
			w.Env = append(w.Env, b.Env...)
			cfg := w.Config(map[string]string{"s3": b.S3Section(),
				"models": ModelsSection(map[string]string{"name": "sec/broken", "source": b.URL("m/")})})
			snapshot := filepath.Join(w.DataDir, "weights", "models--sec--broken", "snapshots", "main")

			d := w.StartDaemon(cfg)
			st := d.WaitModels(time.Minute, "sec/broken")["sec/broken"]
			if st.State != prefetch.StateFailed || !strings.Contains(st.Reason, tc.rule) {
				t.Errorf("daemon: %s %q, want failed naming %q", st.State, st.Reason, tc.rule)
			}
			if _, err := os.Stat(snapshot); err == nil {
				t.Errorf("daemon published an unloadable model at %s", snapshot)
			}
			d.Stop()

			r := w.Warmd("prefetch", "weights", "--config", cfg, "--progress", "none")
			if r.Code == 0 || !strings.Contains(r.Output(), tc.rule) {
				t.Errorf("prefetch weights: exit %d, want a failure naming %q:\n%s", r.Code, tc.rule, r.Output())
			}
			if _, err := os.Stat(snapshot); err == nil {
				t.Errorf("prefetch weights published an unloadable model at %s", snapshot)
			}
			w.Check()
		})
	}
}

// onlyB is a shard header holding tensor b alone (16 bytes).
const onlyB = `{"b":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`

// sharded is a two-shard model (tensor a, 16 bytes, in the first shard; the second's header is
// second over n data bytes) with an index whose weight_map is weightMap.
func sharded(weightMap, second string, n int) map[string][]byte {
	return map[string][]byte{
		"model-00001-of-00002.safetensors": safetensorsFile(`{"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, 16),
		"model-00002-of-00002.safetensors": safetensorsFile(second, n),
		"model.safetensors.index.json":     []byte(`{"metadata":{"total_size":32},"weight_map":` + weightMap + `}`),
	}
}
