package weights

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"warmd.io/warmd/pkg/fsroot"
)

// Limits on what validation reads. maxSafetensorsHeader is the reference loader's own (the safetensors
// crate's MAX_HEADER_SIZE: 100,000,000 bytes); the JSON files vLLM reads are a few KiB in practice.
const (
	maxSafetensorsHeader = 100_000_000
	maxConfigJSON        = 16 << 20
	maxIndexJSON         = 64 << 20
)

// validateLayout checks that the staged files form a model vLLM can load: config.json is a JSON
// object, every *.safetensors file passes the reference loader's rules (checkSafetensors), and every
// safetensors index names shards that are present and agree with it tensor for tensor (checkIndex). The error lists every problem at once; it names our
// own files and the rule each broke, never bytes from inside them (a checksum manifest or header may
// be a symlink to a secret, and this error reaches the status and the Node).
func (f *fetch) validateLayout() error {
	byName := map[string]stagedFile{}
	for _, sf := range f.files {
		byName[sf.obj.Key] = sf
	}
	var problems []string
	if sf, ok := byName["config.json"]; !ok {
		problems = append(problems, "config.json is missing (vLLM needs it; upload it or fix the include globs)")
	} else if err := checkJSONObject(sf.fh, sf.obj.Size, maxConfigJSON); err != nil {
		problems = append(problems, fmt.Sprintf("config.json: %v (vLLM reads the model's architecture from it; upload the model's own config.json)", err))
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	// Shards first: an index is checked against the tensors its shards hold.
	shardTensors := map[string]map[string]bool{}
	for _, n := range names {
		if !strings.HasSuffix(n, ".safetensors") {
			continue
		}
		sf := byName[n]
		tensors, err := readSafetensors(sf.fh, sf.obj.Size)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v (no safetensors loader accepts it; re-upload the file)", fsroot.Quote(n), err))
			continue
		}
		set := make(map[string]bool, len(tensors))
		for _, t := range tensors {
			set[t.name] = true
		}
		shardTensors[n] = set
	}
	for _, n := range names {
		if path.Base(n) == "model.safetensors.index.json" {
			problems = append(problems, checkIndex(byName[n], n, byName, shardTensors, f.src.String())...)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrLayout, strings.Join(problems, "; "))
	}
	return nil
}

// safetensorsDtypeBits are the element sizes of the dtypes the reference loader knows.
var safetensorsDtypeBits = map[string]uint64{
	"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
	"I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64,
	"I64": 64, "U64": 64,
}

// stTensor is what checkSafetensors keeps of one header entry: its position in the header (for the
// message: tensor names are file content and are never quoted) and its byte span.
type stTensor struct {
	ordinal    int
	name       string // compared with an index's weight_map, never printed
	begin, end uint64
	size       uint64 // dtype bits × product(shape) / 8
}

// checkSafetensors applies the reference loader's rules (the safetensors format spec and the
// safetensors crate's read_metadata/validate) to a file of size bytes:
//
//   - at least 8 bytes: a little-endian u64 N, the header's length, at most 100,000,000 and within the file
//   - the header is UTF-8 JSON that begins with '{' and is one object, with no duplicate keys
//   - "__metadata__", if present, is a string-to-string map
//   - every other key is a tensor: dtype one of the known dtypes, shape a list of non-negative
//     integers, data_offsets [begin, end] with begin <= end
//   - sorted by offset, the tensors are contiguous from 0 and do not overlap
//   - each tensor's span is exactly dtype bits × product(shape) / 8 bytes (a whole number)
//   - the last tensor ends exactly at the end of the file: no byte is left uncovered
//
// Each error names the rule broken (with the reference loader's name for it) and, for a tensor, its
// position in the header, never a name or a value from the header.
func checkSafetensors(r io.ReaderAt, size int64) error {
	_, err := readSafetensors(r, size)
	return err
}

// readSafetensors is checkSafetensors that also gives the file's tensors.
func readSafetensors(r io.ReaderAt, size int64) ([]stTensor, error) {
	if size < 8 {
		return nil, fmt.Errorf("HeaderTooSmall: %d bytes is too short for the 8-byte header length", size)
	}
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, fmt.Errorf("read header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > maxSafetensorsHeader {
		return nil, fmt.Errorf("HeaderTooLarge: header length %d exceeds the format's limit of %d bytes", n, maxSafetensorsHeader)
	}
	if n > uint64(size-8) {
		return nil, fmt.Errorf("InvalidHeaderLength: header length %d does not fit the %d-byte file (truncated, or not safetensors)", n, size)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	if !utf8.Valid(hdr) {
		return nil, errors.New("InvalidHeader: the header is not valid UTF-8")
	}
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, errors.New("InvalidHeaderStart: the header does not begin with '{'")
	}
	tensors, err := parseSafetensorsHeader(hdr)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(tensors, func(a, b stTensor) int {
		if c := cmpU64(a.begin, b.begin); c != 0 {
			return c
		}
		return cmpU64(a.end, b.end)
	})
	var next uint64
	for _, t := range tensors {
		switch {
		case t.begin < next:
			return nil, fmt.Errorf("InvalidOffset: tensor #%d's data_offsets [%d, %d] overlap the previous tensor, which ends at %d", t.ordinal, t.begin, t.end, next)
		case t.begin > next:
			return nil, fmt.Errorf("InvalidOffset: bytes %d..%d of the data buffer belong to no tensor (tensor #%d starts at %d); the buffer may not have holes", next, t.begin, t.ordinal, t.begin)
		case t.end-t.begin != t.size:
			return nil, fmt.Errorf("TensorInvalidInfo: tensor #%d spans %d bytes but its dtype and shape need %d", t.ordinal, t.end-t.begin, t.size)
		}
		next = t.end
	}
	if data := uint64(size) - 8 - n; next != data {
		if next > data {
			return nil, fmt.Errorf("MetadataIncompleteBuffer: the tensors need %d bytes of data but the file has %d (truncated?)", next, data)
		}
		return nil, fmt.Errorf("MetadataIncompleteBuffer: the tensors cover %d of the %d data bytes; the last %d bytes belong to no tensor", next, data, data-next)
	}
	return tensors, nil
}

// parseSafetensorsHeader walks the header object token by token, so duplicate keys (which
// encoding/json silently merges) are caught, and nothing but counts and offsets is kept.
func parseSafetensorsHeader(hdr []byte) ([]stTensor, error) {
	dec := json.NewDecoder(strings.NewReader(string(hdr)))
	dec.UseNumber()
	bad := func(format string, a ...any) error { return fmt.Errorf("InvalidHeaderDeserialization: "+format, a...) }
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, bad("the header is not a JSON object")
	}
	seen := map[string]bool{}
	var tensors []stTensor
	for ordinal := 1; dec.More(); {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("the header is not valid JSON")
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, bad("a key appears twice in the header (entry #%d); duplicate keys are not allowed", ordinal)
		}
		seen[key] = true
		if key == "__metadata__" {
			if err := checkMetadata(dec); err != nil {
				return nil, err
			}
			continue
		}
		t, err := parseTensor(dec, ordinal)
		if err != nil {
			return nil, err
		}
		t.name = key
		tensors = append(tensors, t)
		ordinal++
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, bad("the header is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("the header holds more than one JSON value (only whitespace may follow the object)")
	}
	return tensors, nil
}

// checkMetadata requires __metadata__ to be null or an object whose values are all strings.
func checkMetadata(dec *json.Decoder) error {
	bad := errors.New("InvalidHeaderDeserialization: __metadata__ is not a string-to-string map")
	tok, err := dec.Token()
	if err != nil {
		return bad
	}
	if tok == nil {
		return nil
	}
	if tok != json.Delim('{') {
		return bad
	}
	seen := map[string]bool{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return bad
		}
		if seen[k.(string)] {
			return errors.New("InvalidHeaderDeserialization: a key appears twice in __metadata__")
		}
		seen[k.(string)] = true
		v, err := dec.Token()
		if _, ok := v.(string); err != nil || !ok {
			return bad
		}
	}
	if _, err := dec.Token(); err != nil {
		return bad
	}
	return nil
}

// parseTensor reads one tensor's {dtype, shape, data_offsets}; other fields are skipped, as the
// reference loader does.
func parseTensor(dec *json.Decoder, ordinal int) (stTensor, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("InvalidHeaderDeserialization: tensor #%d: "+format, append([]any{ordinal}, a...)...)
	}
	t := stTensor{ordinal: ordinal}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return t, bad("is not an object with dtype, shape and data_offsets")
	}
	var dtype string
	var shape, offsets []uint64
	var haveDtype, haveShape, haveOffsets bool
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return t, bad("is not valid JSON")
		}
		key := tok.(string)
		if seen[key] {
			return t, bad("has a key twice")
		}
		seen[key] = true
		switch key {
		case "dtype":
			v, err := dec.Token()
			s, ok := v.(string)
			if err != nil || !ok {
				return t, bad("dtype is not a string")
			}
			dtype, haveDtype = s, true
		case "shape":
			if shape, err = uintList(dec); err != nil {
				return t, bad("shape is not a list of non-negative integers")
			}
			haveShape = true
		case "data_offsets":
			if offsets, err = uintList(dec); err != nil || len(offsets) != 2 {
				return t, bad("data_offsets is not [begin, end] of non-negative integers")
			}
			haveOffsets = true
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return t, bad("is not valid JSON")
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return t, bad("is not valid JSON")
	}
	if !haveDtype || !haveShape || !haveOffsets {
		return t, bad("lacks dtype, shape or data_offsets")
	}
	bitsPer, ok := safetensorsDtypeBits[dtype]
	if !ok {
		return t, bad("dtype is not one of the safetensors dtypes (BOOL, U8, I8, F8_E4M3, F8_E5M2, F16, BF16, F32, F64, ...)")
	}
	t.begin, t.end = offsets[0], offsets[1]
	if t.end < t.begin {
		return t, fmt.Errorf("InvalidOffset: tensor #%d's data_offsets end before they begin [%d, %d]", ordinal, t.begin, t.end)
	}
	elems := uint64(1)
	for _, d := range shape {
		hi, lo := bits.Mul64(elems, d)
		if hi != 0 {
			return t, fmt.Errorf("ValidationOverflow: tensor #%d's shape overflows 64 bits", ordinal)
		}
		elems = lo
	}
	hi, nbits := bits.Mul64(elems, bitsPer)
	if hi != 0 {
		return t, fmt.Errorf("ValidationOverflow: tensor #%d's size overflows 64 bits", ordinal)
	}
	if nbits%8 != 0 {
		return t, fmt.Errorf("MisalignedSlice: tensor #%d holds %d bits, not a whole number of bytes", ordinal, nbits)
	}
	t.size = nbits / 8
	return t, nil
}

// uintList reads a JSON list of non-negative integers.
func uintList(dec *json.Decoder) ([]uint64, error) {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, errors.New("not a list")
	}
	var out []uint64
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, errors.New("not a number")
		}
		v, err := strconv.ParseUint(num.String(), 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return out, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkJSONObject requires the file to be one JSON object (not empty, not a list, not a string), at
// most max bytes.
func checkJSONObject(r io.ReaderAt, size, max int64) error {
	if size == 0 {
		return errors.New("is empty; it must be a JSON object")
	}
	if size > max {
		return fmt.Errorf("is %d bytes, over the %d-byte limit for a model's JSON file", size, max)
	}
	data := make([]byte, size)
	if _, err := r.ReadAt(data, 0); err != nil && err != io.EOF {
		return fmt.Errorf("read: %w", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return errors.New("is not a JSON object")
	}
	return nil
}

// hfShardName is how Hugging Face names shards (model-00001-of-00004.safetensors); only names of this
// shape are repeated in a message, since the index's content is not ours.
var hfShardName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}-[0-9]{5}-of-[0-9]{5}\.safetensors$`)

// checkIndex checks a model.safetensors.index.json: a JSON object whose weight_map maps tensor names
// to shard files, each a safe relative name among the model's files, and agrees with the shards it
// names (shardTensors: each valid shard's tensor names): every tensor it names is in the shard it
// names, and every tensor of those shards is named, for that shard. vLLM loads the shards an index
// names and fails at load on a weight it does not find, so a model that disagrees is never ready.
// metadata.total_size is not compared: loaders ignore it, and real checkpoints publish values that
// are not the tensors' bytes (tied weights counted twice, older tools' parameter counts), so a check
// would refuse models vLLM loads. Tensor names are file content: messages give counts, never names.
func checkIndex(sf stagedFile, name string, have map[string]stagedFile, shardTensors map[string]map[string]bool, src string) []string {
	at := fsroot.Quote(name)
	if sf.obj.Size > maxIndexJSON {
		return []string{fmt.Sprintf("%s: is %d bytes, over the %d-byte limit for a safetensors index", at, sf.obj.Size, maxIndexJSON)}
	}
	data := make([]byte, sf.obj.Size)
	if _, err := sf.fh.ReadAt(data, 0); err != nil && err != io.EOF {
		return []string{fmt.Sprintf("%s: read: %v", at, err)}
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return []string{fmt.Sprintf("%s: not a safetensors index (a JSON object with a weight_map of tensor names to shard files)", at)}
	}
	if len(idx.WeightMap) == 0 {
		return []string{fmt.Sprintf("%s: weight_map is empty", at)}
	}
	dir := path.Dir(name)
	seen := map[string]bool{}
	var missing []string
	unsafe, unnamed := 0, 0
	fullName := map[string]string{} // weight_map value -> the shard's name among the model's files
	for _, shard := range idx.WeightMap {
		if seen[shard] {
			continue
		}
		seen[shard] = true
		p, err := fsroot.ParsePath(shard)
		if err != nil || path.Base(shard) != shard {
			unsafe++
			continue
		}
		full := p.String()
		if dir != "." {
			full = dir + "/" + full
		}
		if _, ok := have[full]; ok {
			fullName[shard] = full
			continue
		}
		if hfShardName.MatchString(shard) {
			missing = append(missing, full)
		} else {
			unnamed++
		}
	}
	slices.Sort(missing)
	var out []string
	for _, s := range missing {
		out = append(out, fmt.Sprintf("shard %s named in %s's weight_map is missing from %s", s, name, src))
	}
	if unnamed > 0 {
		out = append(out, fmt.Sprintf("%d shard file(s) named in %s's weight_map are missing from %s", unnamed, name, src))
	}
	if unsafe > 0 {
		out = append(out, fmt.Sprintf("%s: %d weight_map value(s) are not plain file names beside the index", at, unsafe))
	}
	return append(out, indexAgrees(idx.WeightMap, fullName, shardTensors, at)...)
}

// indexAgrees compares weight_map with the tensors of the shards it names that are present and
// valid (a missing or broken shard is reported on its own).
func indexAgrees(weightMap, fullName map[string]string, shardTensors map[string]map[string]bool, at string) []string {
	absent, unnamed := 0, 0
	for tensor, shard := range weightMap {
		if set, ok := shardTensors[fullName[shard]]; ok && !set[tensor] {
			absent++
		}
	}
	named := map[string]bool{}
	for _, full := range fullName {
		if named[full] {
			continue
		}
		named[full] = true
		for tensor := range shardTensors[full] {
			if s, ok := weightMap[tensor]; !ok || fullName[s] != full {
				unnamed++
			}
		}
	}
	var out []string
	if absent > 0 {
		out = append(out, fmt.Sprintf("%s: %d tensor(s) its weight_map names are not in the shard it names (vLLM fails at load on a missing weight; upload the index and shards of one checkpoint)", at, absent))
	}
	if unnamed > 0 {
		out = append(out, fmt.Sprintf("%s: %d tensor(s) in the shards it names are not named by its weight_map for that shard (upload the index and shards of one checkpoint)", at, unnamed))
	}
	return out
}
