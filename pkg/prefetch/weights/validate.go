package weights

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
)

// maxSafetensorsHeader bounds the JSON header (the format's own limit is 100 MB).
const maxSafetensorsHeader = 100 << 20

// validateLayout checks that the staged files form a model vLLM can load: config.json exists, every
// *.safetensors header parses with data offsets inside the file, and every shard the index names is
// present. The error lists every problem at once.
func (f *fetch) validateLayout() error {
	byName := map[string]stagedFile{}
	for _, sf := range f.files {
		byName[sf.obj.Key] = sf
	}
	var problems []string
	if _, ok := byName["config.json"]; !ok {
		problems = append(problems, "config.json is missing (vLLM needs it; upload it or fix the include globs)")
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		sf := byName[n]
		switch {
		case strings.HasSuffix(n, ".safetensors"):
			if err := checkSafetensors(sf.fh, sf.obj.Size); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", n, err))
			}
		case path.Base(n) == "model.safetensors.index.json":
			missing, err := missingShards(sf.fh, path.Dir(n), byName)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", n, err))
			}
			for _, s := range missing {
				problems = append(problems, fmt.Sprintf("shard %s named in %s's weight_map is missing from %s", s, n, f.src))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrLayout, strings.Join(problems, "; "))
	}
	return nil
}

// checkSafetensors parses a safetensors header: 8-byte little-endian length, then that much JSON
// mapping tensor names to {dtype, shape, data_offsets: [begin, end]} relative to the data section.
func checkSafetensors(r io.ReaderAt, size int64) error {
	var lb [8]byte
	if size < 8 {
		return fmt.Errorf("%d bytes is too short for a safetensors header", size)
	}
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return fmt.Errorf("read header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > maxSafetensorsHeader || int64(n) > size-8 {
		return fmt.Errorf("header length %d does not fit the %d-byte file (truncated or not safetensors)", n, size)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return fmt.Errorf("read header: %w", err)
	}
	var tensors map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &tensors); err != nil {
		return fmt.Errorf("header is not JSON: %w", err)
	}
	dataSize := size - 8 - int64(n)
	for name, raw := range tensors {
		if name == "__metadata__" {
			continue
		}
		var t struct {
			DataOffsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &t); err != nil || len(t.DataOffsets) != 2 {
			return fmt.Errorf("tensor %q: no [begin, end] data_offsets", name)
		}
		if b, e := t.DataOffsets[0], t.DataOffsets[1]; b < 0 || b > e || e > dataSize {
			return fmt.Errorf("tensor %q: data_offsets [%d, %d] outside the %d-byte data section (file truncated?)", name, b, e, dataSize)
		}
	}
	return nil
}

// missingShards returns the shard files a safetensors index's weight_map names that are not staged.
func missingShards(r io.ReaderAt, dir string, have map[string]stagedFile) ([]string, error) {
	fi, err := r.(*os.File).Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, fi.Size())
	if _, err := r.ReadAt(data, 0); err != nil && err != io.EOF {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("not a safetensors index: %w", err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("weight_map is empty")
	}
	seen := map[string]bool{}
	var missing []string
	for _, shard := range idx.WeightMap {
		p := path.Join(dir, shard)
		if seen[p] {
			continue
		}
		seen[p] = true
		if _, ok := have[p]; !ok {
			missing = append(missing, p)
		}
	}
	slices.Sort(missing)
	return missing, nil
}
