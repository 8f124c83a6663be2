package extender

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// The scheduler calls the extender for every pod with every candidate Node, so the wire path is kept
// cheap: the pod is decoded only as far as PodModel reads it, and HostPriorityList is written by hand
// into a pooled buffer (encoding/json's reflection costs more than the scoring itself at 5,000 Nodes).

// wireArgs is ExtenderArgs' Pod and Nodes with a slim Pod: the Pod is decoded only as far as
// PodModel reads it. decodeArgs fills it (and NodeNames) member by member.
type wireArgs struct {
	Pod   *wirePod
	Nodes *corev1.NodeList
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

func (w *wireArgs) args() *extenderv1.ExtenderArgs {
	a := &extenderv1.ExtenderArgs{Nodes: w.Nodes}
	if w.Pod != nil {
		p := &corev1.Pod{}
		p.Name, p.Namespace, p.Annotations = w.Pod.Metadata.Name, w.Pod.Metadata.Namespace, w.Pod.Metadata.Annotations
		for _, c := range w.Pod.Spec.Containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args})
		}
		a.Pod = p
	}
	return a
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
