package weights_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch/weights"
)

// fakeModel is a small but structurally real model: config.json, a safetensors index, shards with
// valid headers whose sizes are not multiples of any chunk size, and a zero-byte file.
type fakeModel map[string][]byte

// safetensors builds a shard holding one tensor of dataLen bytes.
func safetensors(rng *rand.Rand, tensor string, dataLen int) []byte {
	hdr, _ := json.Marshal(map[string]any{
		"__metadata__": map[string]string{"format": "pt"},
		tensor:         map[string]any{"dtype": "U8", "shape": []int{dataLen}, "data_offsets": []int{0, dataLen}},
	})
	out := make([]byte, 8, 8+len(hdr)+dataLen)
	binary.LittleEndian.PutUint64(out, uint64(len(hdr)))
	out = append(out, hdr...)
	data := make([]byte, dataLen)
	for i := 0; i < dataLen; i += 8 {
		v := rng.Uint64()
		for k := 0; k < 8 && i+k < dataLen; k++ {
			data[i+k] = byte(v >> (8 * k))
		}
	}
	return append(out, data...)
}

// newFakeModel returns a model with the given shard data sizes.
func newFakeModel(seed uint64, shardSizes ...int) fakeModel {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := fakeModel{
		"config.json":            []byte(`{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}`),
		"tokenizer.json":         []byte(`{"version": "1.0"}`),
		"added_tokens.json":      {}, // zero bytes
		"sub/dir/notes.txt":      []byte("nested file\n"),
		"generation_config.json": []byte(`{}`),
	}
	wm := map[string]string{}
	for i, n := range shardSizes {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shardSizes))
		tensor := fmt.Sprintf("layers.%d.weight", i)
		m[name] = safetensors(rng, tensor, n)
		wm[tensor] = name
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]int{"total_size": 0}, "weight_map": wm})
	m["model.safetensors.index.json"] = idx
	return m
}

func (m fakeModel) size() int64 {
	var n int64
	for _, b := range m {
		n += int64(len(b))
	}
	return n
}

// manifest renders a sha256sum file of the model.
func (m fakeModel) manifest() []byte {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		s := sha256.Sum256(m[n])
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(s[:]), n)
	}
	return []byte(b.String())
}

// writeDir places the model's files under dir (a file:// mirror or a versitygw bucket prefix).
func (m fakeModel) writeDir(t testing.TB, dir string) {
	t.Helper()
	for n, b := range m {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (m fakeModel) put(t testing.TB, s objstore.Store, bucket, prefix string, opts objstore.PutOptions) {
	t.Helper()
	for n, b := range m {
		if err := objstore.PutBytes(context.Background(), s, bucket, prefix+n, b, opts); err != nil {
			t.Fatal(err)
		}
	}
}

// checkSnapshot asserts the published snapshot holds exactly the model's bytes.
func checkSnapshot(t testing.TB, snap string, m fakeModel) {
	t.Helper()
	for n, want := range m {
		got, err := os.ReadFile(filepath.Join(snap, filepath.FromSlash(n)))
		if err != nil {
			t.Fatalf("snapshot file %s: %v", n, err)
		}
		if sha256.Sum256(got) != sha256.Sum256(want) {
			t.Fatalf("snapshot file %s: %d bytes differ from the source's %d", n, len(got), len(want))
		}
	}
}

func newEngine(t testing.TB, dataDir string, mut func(*weights.Options)) *weights.Engine {
	t.Helper()
	o := weights.Options{DataDir: dataDir, ChunkSize: 1 << 20, Concurrency: 8,
		Open: weights.SourceOpener(func(context.Context) (objstore.Store, error) { return nil, fmt.Errorf("no S3 in this test") })}
	if mut != nil {
		mut(&o)
	}
	e, err := weights.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func fileModel(name, dir string) config.Model {
	return config.Model{Name: name, Source: "file://" + dir + "/", Revision: "main"}
}

// setIndex replaces the model's safetensors index with weight_map wm.
func (m fakeModel) setIndex(wm map[string]string) {
	m["model.safetensors.index.json"], _ = json.Marshal(map[string]any{"metadata": map[string]int{"total_size": 0}, "weight_map": wm})
}

// safetensors2 is a valid safetensors file with two U8 tensors of n bytes each.
func safetensors2(seed uint64, a, b string, n int) []byte {
	hdr, _ := json.Marshal(map[string]any{
		a: map[string]any{"dtype": "U8", "shape": []int{n}, "data_offsets": []int{0, n}},
		b: map[string]any{"dtype": "U8", "shape": []int{n}, "data_offsets": []int{n, 2 * n}}})
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	out = append(out, hdr...)
	for i := range 2 * n {
		out = append(out, byte(uint64(i)*seed))
	}
	return out
}
