package idle

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// This file holds no benchmark, so it carries no build tag: `make test` runs TestHeartbeatClassification
// (the rule idle_bench_test.go counts API writes by), while the benchmark that uses it stays under
// -tags bench.

// auditPolicy records every request of user at Metadata level and its writes at Request level (the
// body, so a heartbeat can be told from a write that changed something); nothing of anyone else.
func auditPolicy(user string) string {
	return fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  users: [%q]
  verbs: [create, update, patch, delete, deletecollection]
- level: Metadata
  users: [%q]
- level: None
`, user, user)
}

// auditEvent is the part of an audit.k8s.io/v1 Event the benchmark reads.
type auditEvent struct {
	AuditID   string `json:"auditID"`
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestObject json.RawMessage `json:"requestObject"`
	Received      time.Time       `json:"requestReceivedTimestamp"`
}

// request is one API request as the API server saw it (its audit events merged by audit ID).
type request struct {
	auditEvent
}

func (r request) write() bool {
	switch r.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

func (r request) what() string {
	if r.ObjectRef == nil {
		return r.Verb
	}
	s := r.Verb + " " + r.ObjectRef.Resource
	if r.ObjectRef.Subresource != "" {
		s += "/" + r.ObjectRef.Subresource
	}
	return s
}

// readAudit returns user's requests from the audit log at path, in the order they were received.
func readAudit(path, user string) ([]request, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	byID := map[string]*request{}
	var order []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("audit log line %q: %w", sc.Text(), err)
		}
		if e.User.Username != user {
			continue
		}
		if r, ok := byID[e.AuditID]; ok {
			if e.Stage == "ResponseComplete" {
				r.ResponseStatus = e.ResponseStatus
			}
			continue
		}
		byID[e.AuditID] = &request{e}
		order = append(order, e.AuditID)
	}
	out := make([]request, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Received.Before(out[j].Received) })
	return out, sc.Err()
}

// heartbeat reports whether a write's body equals the previous write of the same kind to the same
// object once every lastHeartbeatTime is removed: a write that only refreshed the heartbeat.
func heartbeat(prev, cur request) bool {
	if prev.what() != cur.what() || prev.ObjectRef == nil || cur.ObjectRef == nil || prev.ObjectRef.Name != cur.ObjectRef.Name {
		return false
	}
	a, errA := withoutHeartbeat(prev.RequestObject)
	b, errB := withoutHeartbeat(cur.RequestObject)
	return errA == nil && errB == nil && a == b && strings.Contains(string(cur.RequestObject), "lastHeartbeatTime")
}

func withoutHeartbeat(raw json.RawMessage) (string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	var strip func(any) any
	strip = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			delete(t, "lastHeartbeatTime")
			for k, e := range t {
				t[k] = strip(e)
			}
		case []any:
			for i, e := range t {
				t[i] = strip(e)
			}
		}
		return x
	}
	b, err := json.Marshal(strip(v))
	return string(b), err
}

// TestHeartbeatClassification checks the rule that tells a heartbeat from a write that changed
// something, on the bodies readiness's condition apply sends.
func TestHeartbeatClassification(t *testing.T) {
	body := func(hb, reason string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"kind":"Node","status":{"conditions":[{"type":"WarmdReady","status":"True","reason":%q,"lastHeartbeatTime":%q,"lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`, reason, hb))
	}
	w := func(name string, b json.RawMessage) request {
		r := request{auditEvent{Verb: "patch", RequestObject: b}}
		r.ObjectRef = &struct {
			Resource    string `json:"resource"`
			Subresource string `json:"subresource"`
			Name        string `json:"name"`
		}{Resource: "nodes", Subresource: "status", Name: name}
		return r
	}
	prev := w("n", body("2026-01-01T00:00:00Z", "Warm"))
	for _, c := range []struct {
		name string
		cur  request
		want bool
	}{
		{"only the heartbeat moved", w("n", body("2026-01-01T00:05:00Z", "Warm")), true},
		{"the reason changed", w("n", body("2026-01-01T00:05:00Z", "Cold")), false},
		{"another node", w("m", body("2026-01-01T00:05:00Z", "Warm")), false},
		{"no heartbeat field at all", w("n", json.RawMessage(`{"kind":"Node"}`)), false},
	} {
		if got := heartbeat(prev, c.cur); got != c.want {
			t.Errorf("%s: heartbeat = %v, want %v", c.name, got, c.want)
		}
	}
}
