package extender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// The scheduler calls the extender for every pod with every candidate Node, so the wire path is kept
// cheap: the pod is decoded only as far as PodModel reads it, and HostPriorityList is written by hand
// into a pooled buffer (encoding/json's reflection costs more than the scoring itself at 5,000 Nodes).

// wireArgs is ExtenderArgs with a slim Pod (Go's JSON field matching is case-insensitive, so the
// scheduler's "Pod"/"Nodes"/"NodeNames" keys land here as they do in extenderv1.ExtenderArgs).
type wireArgs struct {
	Pod       *wirePod         `json:"pod"`
	Nodes     *corev1.NodeList `json:"nodes"`
	NodeNames nameList         `json:"nodenames"`
}

type wirePod struct {
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Containers []struct {
			Name    string   `json:"name"`
			Image   string   `json:"image"`
			Command []string `json:"command"`
			Args    []string `json:"args"`
		} `json:"containers"`
	} `json:"spec"`
}

// nameList decodes NodeNames straight from the request bytes encoding/json hands to UnmarshalJSON
// (a json.RawMessage would copy them first).
type nameList struct {
	names []string
	set   bool
}

func (n *nameList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	names, err := parseNames(b)
	if err != nil {
		return fmt.Errorf("NodeNames: %w", err)
	}
	n.names, n.set = names, true
	return nil
}

func (w *wireArgs) args() (*extenderv1.ExtenderArgs, error) {
	a := &extenderv1.ExtenderArgs{Nodes: w.Nodes}
	if w.NodeNames.set {
		a.NodeNames = &w.NodeNames.names
	}
	if w.Pod != nil {
		p := &corev1.Pod{}
		p.Name, p.Namespace, p.Annotations = w.Pod.Metadata.Name, w.Pod.Metadata.Namespace, w.Pod.Metadata.Annotations
		for _, c := range w.Pod.Spec.Containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args})
		}
		a.Pod = p
	}
	return a, nil
}

// parseNames reads a JSON array of strings. Node names need no escapes, so the common case converts
// the array to one string and slices it (one allocation instead of one per name); anything unusual
// (escapes, odd spacing) goes through encoding/json.
func parseNames(raw []byte) ([]string, error) {
	s := string(bytes.TrimSpace(raw))
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' && !strings.ContainsAny(s, "\\ \t\r\n") {
		body := s[1 : len(s)-1]
		if body == "" {
			return []string{}, nil
		}
		names := make([]string, 0, strings.Count(body, ",")+1)
		ok := true
		for body != "" {
			if len(body) < 2 || body[0] != '"' {
				ok = false
				break
			}
			end := strings.IndexByte(body[1:], '"') + 1
			if end <= 0 {
				ok = false
				break
			}
			names = append(names, body[1:end])
			body = body[end+1:]
			if body == "" {
				break
			}
			if body[0] != ',' || len(body) == 1 {
				ok = false
				break
			}
			body = body[1:]
		}
		if ok {
			return names, nil
		}
	}
	var names []string
	if err := json.Unmarshal(raw, &names); err != nil {
		return nil, err
	}
	return names, nil
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// appendPriorities writes l as JSON exactly as encoding/json would ([{"Host":…,"Score":…},…]).
func appendPriorities(b []byte, l extenderv1.HostPriorityList) []byte {
	b = append(b, '[')
	for i, h := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"Host":`...)
		b = appendString(b, h.Host)
		b = append(b, `,"Score":`...)
		b = strconv.AppendInt(b, h.Score, 10)
		b = append(b, '}')
	}
	return append(b, ']', '\n')
}

// appendString writes s as a JSON string; Node names are DNS subdomains, so the fast path is a copy.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
