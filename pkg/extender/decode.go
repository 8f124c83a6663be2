package extender

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// decodeArgs reads the ExtenderArgs kube-scheduler sends ({"Pod":…,"Nodes":…,"NodeNames":[…]}) from
// r as a stream: the top-level object is walked key by key and each member is decoded on its own, so
// the body is never held whole, only the member being decoded (at most the NodeNames array, 1.25 MiB
// at 5,000 names of the longest legal length; see DefaultMaxBodyBytes). Keys match case-insensitively
// as encoding/json matches struct fields; a member sent twice is refused (last-wins would let one
// body name its candidates twice), unknown members are skipped, and anything after the object is an
// error. An error from r (a *http.MaxBytesError among them) is wrapped, never replaced.
func decodeArgs(r io.Reader) (*extenderv1.ExtenderArgs, error) {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	var wa wireArgs
	var seen [3]bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string) // inside an object the decoder only returns string keys
		i := member(key)
		var dst any = &skipped{}
		if i >= 0 {
			if seen[i] {
				return nil, fmt.Errorf("member %s sent twice", members[i])
			}
			seen[i] = true
			dst = [...]any{&wa.Pod, &wa.Nodes, &wa.NodeNames}[i]
		}
		if err := dec.Decode(dst); err != nil {
			return nil, fmt.Errorf("%s: %w", cut(key), err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("more data after the ExtenderArgs object")
		}
		return nil, err
	}
	return wa.args()
}

// members are ExtenderArgs' JSON keys as kube-scheduler writes them (the Go field names: the type
// has no json tags).
var members = [...]string{"Pod", "Nodes", "NodeNames"}

func member(key string) int {
	for i, m := range members {
		if strings.EqualFold(key, m) {
			return i
		}
	}
	return -1
}

// skipped consumes an unknown member without keeping it (json.RawMessage would copy it).
type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %s", want, cut(fmt.Sprint(tok)))
	}
	return nil
}

// cut keeps an echoed piece of the request short: an error message quotes at most 64 bytes of it.
func cut(s string) string {
	const n = 64
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:n], len(s))
}
