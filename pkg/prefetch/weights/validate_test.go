package weights_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
)

// st is fixtures.RawSafetensors: a hand-written header and a data buffer of n zero bytes.
var st = fixtures.RawSafetensors

// withLength builds a file whose length field says n, followed by rest.
func withLength(n uint64, rest string) []byte {
	out := make([]byte, 8)
	binary.LittleEndian.PutUint64(out, n)
	return append(out, rest...)
}

// The secret the hostile headers carry in every field a message could quote: tensor names, dtypes,
// metadata values. It must appear in no error.
const secret = "CANARY-SECRET-TOKEN"

// TestSafetensorsRules: each case is a hand-made model.safetensors beside a good config.json, fetched
// through the engine from a file:// source; a valid one publishes, an invalid one fails with the
// rule it breaks and publishes nothing. These are the reference loader's rules (safetensors format
// spec, the safetensors crate's read_metadata and Metadata::validate).
func TestSafetensorsRules(t *testing.T) {
	t.Parallel()
	const f16x6 = `"dtype":"F16","shape":[2,3],"data_offsets":[0,12]`
	tests := []struct {
		name string
		file []byte
		rule string // "" means the file is valid
	}{
		{"one tensor", st(`{"w":{`+f16x6+`}}`, 12), ""},
		{"metadata map", st(`{"__metadata__":{"format":"pt"},"w":{`+f16x6+`}}`, 12), ""},
		{"metadata null", st(`{"__metadata__":null,"w":{`+f16x6+`}}`, 12), ""},
		{"padded header", st(`{"w":{`+f16x6+`}}      `, 12), ""},
		{"header order differs from offset order", st(`{"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 8), ""},
		{"empty and scalar tensors", st(`{"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, 4), ""},
		{"sub-byte dtype", st(`{"q":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}}`, 3), ""},
		{"unknown tensor fields are ignored", st(`{"w":{`+f16x6+`,"extra":[1,{"x":2}]}}`, 12), ""},

		{"overlapping data_offsets", st(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}`, 12), "InvalidOffset"},
		{"same span twice", st(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, 8), "InvalidOffset"},
		{"dtype x shape larger than span", st(`{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}`, 8), "TensorInvalidInfo"},
		{"dtype x shape smaller than span", st(`{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}}`, 8), "TensorInvalidInfo"},
		{"bytes no tensor covers at the end", st(`{"w":{`+f16x6+`}}`, 16), "MetadataIncompleteBuffer"},
		{"hole between tensors", st(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}`, 12), "InvalidOffset"},
		{"first tensor not at 0", st(`{"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 8), "InvalidOffset"},
		{"data past the end", st(`{"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, 8), "MetadataIncompleteBuffer"},
		{"end before begin", st(`{"w":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}}`, 8), "InvalidOffset"},
		{"metadata a string", st(`{"__metadata__":"`+secret+`","w":{`+f16x6+`}}`, 12), "__metadata__ is not a string-to-string map"},
		{"metadata a list", st(`{"__metadata__":["`+secret+`"],"w":{`+f16x6+`}}`, 12), "__metadata__ is not a string-to-string map"},
		{"metadata value not a string", st(`{"__metadata__":{"`+secret+`":1},"w":{`+f16x6+`}}`, 12), "__metadata__ is not a string-to-string map"},
		{"metadata nested object", st(`{"__metadata__":{"k":{"`+secret+`":"v"}},"w":{`+f16x6+`}}`, 12), "__metadata__ is not a string-to-string map"},
		{"duplicate tensor name", st(`{"`+secret+`":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"`+secret+`":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 8), "appears twice"},
		{"duplicate metadata key", st(`{"__metadata__":{"k":"a","k":"b"},"w":{`+f16x6+`}}`, 12), "twice in __metadata__"},
		{"duplicate field in a tensor", st(`{"w":{`+f16x6+`,"dtype":"U8"}}`, 12), "has a key twice"},
		{"unknown dtype", st(`{"w":{"dtype":"`+secret+`","shape":[4],"data_offsets":[0,4]}}`, 4), "dtype is not one of"},
		{"dtype not a string", st(`{"w":{"dtype":16,"shape":[4],"data_offsets":[0,4]}}`, 4), "dtype is not a string"},
		{"missing shape", st(`{"w":{"dtype":"U8","data_offsets":[0,4]}}`, 4), "lacks dtype, shape or data_offsets"},
		{"negative dim", st(`{"w":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}}`, 4), "shape is not a list of non-negative integers"},
		{"fractional dim", st(`{"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,4]}}`, 4), "shape is not a list"},
		{"three offsets", st(`{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4,8]}}`, 8), "data_offsets is not [begin, end]"},
		{"tensor not an object", st(`{"`+secret+`":"`+secret+`"}`, 0), "is not an object"},
		{"shape overflow", st(`{"w":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}}`, 8), "ValidationOverflow"},
		{"misaligned sub-byte tensor", st(`{"q":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2), "MisalignedSlice"},
		{"header not an object", st(`["`+secret+`"]`, 0), "InvalidHeaderStart"},
		{"header with a leading space", st(` {"w":{`+f16x6+`}}`, 12), "InvalidHeaderStart"},
		{"header not JSON", st(`{"`+secret+`" oops}`, 0), "InvalidHeaderDeserialization"},
		{"header not UTF-8", st("{\"w\xff\":{"+f16x6+"}}", 12), "not valid UTF-8"},
		{"two JSON values", st(`{"w":{`+f16x6+`}} {}`, 12), "more than one JSON value"},
		{"header length over the limit", withLength(100_000_001, "{}"), "HeaderTooLarge"},
		{"header length past the file", withLength(4096, `{"w":{`+f16x6+`}}`), "InvalidHeaderLength"},
		{"shorter than the length field", []byte{1, 2, 3}, "HeaderTooSmall"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := fakeModel{"config.json": []byte(`{"model_type": "llama"}`), "model.safetensors": tc.file}
			err, published := fetchModel(t, m)
			if tc.rule == "" {
				if err != nil || !published {
					t.Fatalf("a valid file was refused: %v", err)
				}
				return
			}
			if !errors.Is(err, weights.ErrLayout) || !strings.Contains(err.Error(), tc.rule) {
				t.Fatalf("err = %v, want ErrLayout naming %q", err, tc.rule)
			}
			if !strings.Contains(err.Error(), `"model.safetensors"`) {
				t.Errorf("the error does not name the file: %v", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error quotes header bytes: %v", err)
			}
			if published {
				t.Error("an invalid model was published")
			}
		})
	}
}

func TestConfigJSONMustBeAnObject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, config, want string
	}{
		{"empty", "", "config.json: is empty"},
		{"list", `["` + secret + `"]`, "config.json: is not a JSON object"},
		{"string", `"` + secret + `"`, "config.json: is not a JSON object"},
		{"null", "null", "config.json: is not a JSON object"},
		{"not JSON", secret, "config.json: is not a JSON object"},
		{"truncated", `{"model_type": "ll`, "config.json: is not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeModel(3, 100)
			m["config.json"] = []byte(tc.config)
			err, published := fetchModel(t, m)
			if !errors.Is(err, weights.ErrLayout) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrLayout with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) || published {
				t.Fatalf("quoted the file or published: %v (published %v)", err, published)
			}
		})
	}
}

func TestIndexNamesNoOutsideShard(t *testing.T) {
	t.Parallel()
	m := newFakeModel(4, 100, 200)
	m["model.safetensors.index.json"] = []byte(`{"weight_map": {"a": "model-00001-of-00002.safetensors",
		"b": "../../etc/` + secret + `", "c": "/abs/` + secret + `.safetensors", "d": "` + secret + `.safetensors"}}`)
	err, published := fetchModel(t, m)
	if !errors.Is(err, weights.ErrLayout) || published {
		t.Fatalf("err = %v, published %v", err, published)
	}
	for _, want := range []string{"2 weight_map value(s) are not plain file names", "1 shard file(s) named in model.safetensors.index.json's weight_map are missing"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("the error quotes the index: %v", err)
	}
}

// fetchModel writes m as a file:// source, fetches it, and reports the error and whether a snapshot
// was published.
func fetchModel(t *testing.T, m fakeModel) (error, bool) {
	t.Helper()
	src := t.TempDir()
	m.writeDir(t, src)
	data := t.TempDir()
	e := newEngine(t, data, nil)
	st, err := e.Fetch(context.Background(), fileModel("acme/hand-made", src), nil)
	if err != nil && (st.State != prefetch.StateFailed || st.Reason == "") {
		t.Errorf("failed fetch has status %+v", st)
	}
	_, serr := os.Stat(filepath.Join(data, "weights", "models--acme--hand-made", "snapshots", "main"))
	return err, serr == nil
}
