package extender

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// TooManyNodesError is decodeArgs' refusal of a request naming more candidates than its bound: it
// stops reading at the first one over, so a request's memory is bounded by the count, not the body.
type TooManyNodesError struct{ Max int }

func (e *TooManyNodesError) Error() string {
	return fmt.Sprintf("more than %d candidate Nodes, the most this extender takes (--max-nodes)", e.Max)
}

// decodeArgs reads the ExtenderArgs kube-scheduler sends ({"Pod":…,"Nodes":…,"NodeNames":[…]}) from
// r as a stream: the top-level object is walked key by key, the Pod is decoded on its own, and the
// candidates (NodeNames, or Nodes' items) one at a time, refused at the first past maxNodes
// (*TooManyNodesError). So the body is never held whole: a request holds the Pod (at most the
// body bound) and at most maxNodes candidates, whatever the body's size or the length of its
// names. Keys match case-insensitively as encoding/json matches struct fields; a member sent twice
// is refused (last-wins would let one body name its candidates twice), unknown members are skipped,
// and anything after the object is an error. An error from r (a *http.MaxBytesError among them) is
// wrapped, never replaced.
func decodeArgs(r io.Reader, maxNodes int) (*extenderv1.ExtenderArgs, error) {
	dec := json.NewDecoder(r)
	var wa wireArgs
	var names []string
	namesSet := false
	present, err := walkObject(dec, []string{"Pod", "Nodes", "NodeNames"}, func(key string) error {
		switch key {
		case "Pod":
			return dec.Decode(&wa.Pod)
		case "Nodes":
			nl, err := decodeNodeList(dec, maxNodes)
			wa.Nodes = nl
			return err
		case "NodeNames":
			var err error
			names, namesSet, err = decodeNames(dec, maxNodes)
			return err
		}
		return dec.Decode(&skipped{})
	})
	if err != nil {
		return nil, err
	}
	if !present {
		return nil, errors.New("want an ExtenderArgs object, got null")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("more data after the ExtenderArgs object")
		}
		return nil, err
	}
	a := wa.args()
	if namesSet {
		a.NodeNames = &names
	}
	return a, nil
}

// walkObject reads one JSON object (or null: present false) from dec and calls member for each
// key: with the matching name of known (case-insensitively, as encoding/json matches fields), else
// with "". A known member sent twice is an error. member must consume the value.
func walkObject(dec *json.Decoder, known []string, member func(key string) error) (present bool, err error) {
	seen := map[string]bool{}
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	if tok == nil {
		return false, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return false, fmt.Errorf("want an object, got %s", cut(fmt.Sprint(tok)))
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return true, err
		}
		raw, _ := tok.(string) // inside an object the decoder only returns string keys
		key := ""
		for _, k := range known {
			if strings.EqualFold(raw, k) {
				key = k
			}
		}
		if key != "" {
			if seen[key] {
				return true, fmt.Errorf("member %s sent twice", key)
			}
			seen[key] = true
		}
		if err := member(key); err != nil {
			return true, fmt.Errorf("%s: %w", cut(raw), err)
		}
	}
	_, err = dec.Token() // the closing '}': More reported the end, so it is the delimiter
	return true, err
}

// walkArray reads one JSON array (or null: set false) from dec, calling each per element and
// refusing the element past max.
func walkArray(dec *json.Decoder, max int, each func() error) (set bool, err error) {
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	if tok == nil {
		return false, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return false, fmt.Errorf("want an array, got %s", cut(fmt.Sprint(tok)))
	}
	for n := 0; dec.More(); n++ {
		if n == max {
			return true, &TooManyNodesError{Max: max}
		}
		if err := each(); err != nil {
			return true, fmt.Errorf("element %d: %w", n, err)
		}
	}
	_, err = dec.Token()
	return true, err
}

// decodeNames reads NodeNames: an array of strings, one token each.
func decodeNames(dec *json.Decoder, max int) ([]string, bool, error) {
	names := []string{}
	set, err := walkArray(dec, max, func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		s, ok := tok.(string)
		if !ok {
			return fmt.Errorf("want a Node name (a string), got %s", cut(fmt.Sprint(tok)))
		}
		names = append(names, s)
		return nil
	})
	if !set {
		names = nil
	}
	return names, set, err
}

// decodeNodeList reads Nodes (a NodeList whole, nodeCacheCapable false): its items one Node at a
// time, its list metadata as encoding/json would.
func decodeNodeList(dec *json.Decoder, max int) (*corev1.NodeList, error) {
	nl := &corev1.NodeList{}
	present, err := walkObject(dec, []string{"kind", "apiVersion", "metadata", "items"}, func(key string) error {
		switch key {
		case "kind":
			return dec.Decode(&nl.Kind)
		case "apiVersion":
			return dec.Decode(&nl.APIVersion)
		case "metadata":
			return dec.Decode(&nl.ListMeta)
		case "items":
			_, err := walkArray(dec, max, func() error {
				nl.Items = append(nl.Items, corev1.Node{})
				return dec.Decode(&nl.Items[len(nl.Items)-1])
			})
			return err
		}
		return dec.Decode(&skipped{})
	})
	if err != nil || !present {
		return nil, err // null leaves Nodes nil, as encoding/json does
	}
	return nl, nil
}

// skipped consumes an unknown member without keeping it (json.RawMessage would copy it).
type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

// cut keeps an echoed piece of the request short: an error message quotes at most 64 bytes of it.
func cut(s string) string {
	const n = 64
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:n], len(s))
}
