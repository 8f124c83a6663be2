package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"
)

// FuzzCheckSafetensors: no input panics the validator, and whatever it accepts is a file a loader can
// index: its header decodes as JSON and its tensors' spans cover the data buffer exactly.
func FuzzCheckSafetensors(f *testing.F) {
	seed := func(hdr string, data int) []byte {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, uint64(len(hdr)))
		return append(append(b, hdr...), make([]byte, data)...)
	}
	f.Add(seed(`{"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}}`, 12))
	f.Add(seed(`{"__metadata__":{"a":"b"},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"F4","shape":[2],"data_offsets":[4,5]}}`, 5))
	f.Add(seed(`{}`, 0))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, file []byte) {
		if checkSafetensors(bytes.NewReader(file), int64(len(file))) != nil {
			return
		}
		n := binary.LittleEndian.Uint64(file[:8])
		var hdr map[string]json.RawMessage
		if err := json.Unmarshal(file[8:8+n], &hdr); err != nil {
			t.Fatalf("accepted a header encoding/json cannot read: %v", err)
		}
		var end uint64
		for k, raw := range hdr {
			if k == "__metadata__" {
				continue
			}
			var ti struct {
				DataOffsets [2]uint64 `json:"data_offsets"`
			}
			if err := json.Unmarshal(raw, &ti); err != nil {
				t.Fatalf("accepted a tensor without readable offsets: %v", err)
			}
			end = max(end, ti.DataOffsets[1])
		}
		if end != uint64(len(file))-8-n {
			t.Fatalf("accepted a file whose tensors end at %d of a %d-byte buffer", end, uint64(len(file))-8-n)
		}
	})
}
