package security

// Class 8: models published as "ready" although no safetensors loader accepts them. Each case serves
// a model whose one defect is in a file's content (from the hostile stub, which serves any bytes) and
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
		rule        string
	}{
		{"overlapping data_offsets", goodConfig, safetensorsFile(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}`, 12), "InvalidOffset"},
		{"dtype x shape larger than the span", goodConfig, safetensorsFile(`{"w":{"dtype":"F32","shape":[1024],"data_offsets":[0,16]}}`, 16), "TensorInvalidInfo"},
		{"bytes no tensor covers", goodConfig, safetensorsFile(`{"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, 4096), "MetadataIncompleteBuffer"},
		{"non-object __metadata__", goodConfig, safetensorsFile(`{"__metadata__":["pt"],"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, 16), "__metadata__ is not a string-to-string map"},
		{"empty config.json", "", safetensorsFile(`{"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, 16), "config.json: is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := StubBucket(t)
			b.PutModel("m/", map[string][]byte{"config.json": []byte(tc.config), "model.safetensors": tc.safetensors})
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
