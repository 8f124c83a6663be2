package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// decode turns a YAML document into a NodeConfig without stopping at the first problem: it decodes
// the document into a generic tree, walks the tree against NodeConfig's type, reports every unknown
// field and every value of the wrong type (with its path and what was expected), drops those, and
// decodes what is left. A strict decoder would stop at the first unknown field and hide every other
// problem of the file; the walk reports them all, and Validate then adds the rest.
//
// Only YAML that cannot be read at all (a syntax error, a key given twice, a document that is not a
// mapping) is returned as a plain error.
func decode(data []byte) (*NodeConfig, problems, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, nil, fmt.Errorf("decode config: %w", cleanYAMLError(err))
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, nil, fmt.Errorf("decode config: %w", err)
	}
	if tree == nil {
		return nil, nil, errEmpty
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("config is %s, not a mapping: want a NodeConfig document (apiVersion: %s, kind: %s)", kindOf(tree), APIVersion, Kind)
	}
	var p problems
	walk(&p, "", obj, reflect.TypeFor[NodeConfig]())
	clean, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, fmt.Errorf("decode config: %w", err)
	}
	var c NodeConfig
	if err := json.Unmarshal(clean, &c); err != nil { // every leaf was checked; this is a bug if it fails
		return nil, nil, fmt.Errorf("decode config: %w", err)
	}
	return &c, p, nil
}

var errEmpty = errors.New("config is empty: want a NodeConfig document (apiVersion: " + APIVersion + ", kind: " + Kind + ")")

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// walk checks v against t and returns the value to keep (numbers and booleans given for a string
// field become that string, as the YAML library would make them) and whether v can be decoded at
// all. Unknown keys and ill-typed values are reported and removed from the tree in place.
func walk(p *problems, at string, v any, t reflect.Type) (any, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil, true // null leaves the zero value
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return v, leaf(p, at, v, t)
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			p.add(at, fmt.Sprintf("is %s, want a mapping", kindOf(v)), "")
			return nil, false
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(obj) {
			ft, ok := fields[k]
			if !ok {
				p.add(join(at, k), "unknown field", suggest(k, fields))
				delete(obj, k)
				continue
			}
			nv, ok := walk(p, join(at, k), obj[k], ft)
			if !ok {
				delete(obj, k)
				continue
			}
			obj[k] = nv
		}
		return obj, true
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			p.add(at, fmt.Sprintf("is %s, want a list", kindOf(v)), "")
			return nil, false
		}
		for i := range arr {
			nv, ok := walk(p, fmt.Sprintf("%s[%d]", at, i), arr[i], t.Elem())
			if !ok {
				nv = nil // keep the index so later problems name the right entry
			}
			arr[i] = nv
		}
		return arr, true
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			p.add(at, fmt.Sprintf("is %s, want a mapping", kindOf(v)), "")
			return nil, false
		}
		for _, k := range sortedKeys(obj) {
			nv, ok := walk(p, join(at, k), obj[k], t.Elem())
			if !ok {
				delete(obj, k)
				continue
			}
			obj[k] = nv
		}
		return obj, true
	case reflect.String:
		switch x := v.(type) {
		case string:
			return x, true
		case json.Number:
			return x.String(), true
		case bool:
			return fmt.Sprint(x), true
		}
	}
	return v, leaf(p, at, v, t)
}

// leaf decodes one scalar into a fresh value of t to see whether it fits.
func leaf(p *problems, at string, v any, t reflect.Type) bool {
	b, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(b, reflect.New(t).Interface())
	}
	if err == nil {
		return true
	}
	p.add(at, fmt.Sprintf("%s is not %s", describe(v), want(t)), "")
	return false
}

// want names the expected value of a field type for a person.
func want(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[metav1.Duration]():
		return "a duration (such as 30s, 15m or 1h)"
	case reflect.TypeFor[resource.Quantity]():
		return "a quantity (such as 16Mi or 500Gi)"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	}
	return "a " + t.String()
}

// describe renders a value from the file for a message: scalars shortened and quoted, the rest by kind.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return quote(x)
	case json.Number:
		if n := x.String(); len(n) <= 32 {
			return n
		}
		return "a " + fmt.Sprint(len(x.String())) + "-digit number"
	case bool:
		return fmt.Sprint(x)
	}
	return kindOf(v)
}

func kindOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

// jsonFields maps a struct's JSON field names to their types, following embedded structs the way
// encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					out[k] = v
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// suggest names the field the author probably meant: a case-insensitive match or one within two
// edits; otherwise the fields allowed here.
func suggest(k string, fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	slices.Sort(names)
	best, bestD := "", 3
	for _, n := range names {
		if strings.EqualFold(n, k) {
			return "did you mean " + n + "? field names are case-sensitive"
		}
		if d := editDistance(strings.ToLower(k), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	if best != "" {
		return "did you mean " + best + "?"
	}
	return "fields here: " + strings.Join(names, ", ")
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// join appends a key from the file to a field path; a key with unusual characters is quoted so a
// hostile key cannot put control characters or a fake path into the message.
func join(at, k string) string {
	if !plainKey(k) {
		k = "[" + quote(k) + "]"
		if at == "" {
			return k
		}
		return at + k
	}
	if at == "" {
		return k
	}
	return at + "." + k
}

func plainKey(k string) bool {
	if k == "" || len(k) > 128 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_./", c) >= 0) {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
