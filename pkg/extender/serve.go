package extender

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// The bounds on one scheduler request, from the kube-scheduler extender wire format: the scheduler
// POSTs json.Marshal(ExtenderArgs{Pod, Nodes, NodeNames}); with nodeCacheCapable (every scheduler
// config warmd ships) Nodes is null and NodeNames lists the candidates, else NodeNames is null and
// Nodes holds every candidate Node object whole.
//
//   - A Node's name is a DNS subdomain, at most 253 bytes; on the wire `"name",` is 256 bytes, so
//     DefaultMaxNodes (10,000: twice the 5,000 Nodes Kubernetes supports) names are 2.44 MiB.
//   - The Pod is sent whole. No Pod's JSON is larger than the 3 MiB the API server accepts in one
//     request body (its MaxRequestBodyBytes); a real vLLM pod is a few KiB.
//   - The envelope ({"Pod":,"Nodes":null,"NodeNames":[]}) is 40 bytes.
//
// 3 MiB + 2.44 MiB + 40 B = 5.44 MiB, so DefaultMaxBodyBytes is 6 MiB: every request of a cluster of
// 10,000 Nodes with the longest names and the largest Pod fits, and a realistic one (5,000 names of
// 30 bytes, a 10 KiB Pod: 180 KiB) is 3% of it. Full Node objects (nodeCacheCapable false) are about
// 10–20 KiB each (status.images dominates), so such a scheduler needs --max-body-bytes raised to
// about 20 KiB per Node and the memory limit with it (docs/security.md, "The extender endpoint").
const (
	DefaultMaxNodes     = 10_000
	DefaultMaxBodyBytes = 6 << 20
	// DefaultMaxInFlight is 8. A kube-scheduler calls its extenders from its one scheduling loop, one
	// pod at a time, so each scheduler holds one request (two for a moment, when a timed-out one is
	// still being read); 8 covers the main and a second scheduler with room for leader hand-overs.
	// Decoding holds the Pod (at most the body, in the decoder's buffer and decoded) and at most
	// MaxNodes names (decodeArgs stops at the first past it), so a request holds about 3× the body
	// at most and 8 requests at the body bound stay under 150 MiB of the Deployment's 512 MiB.
	DefaultMaxInFlight = 8
)

// serve wraps one verb with the bounds: a slot of MaxInFlight or 503 at once, a body of at most
// MaxBodyBytes (413, refused from Content-Length before reading when it says so), at most MaxNodes
// candidates (413, refused at the first past it while reading), and a streaming decode (decodeArgs).
func (x *Extender) serve(verb string, do func(*extenderv1.ExtenderArgs) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		result := "ok"
		defer func() {
			if x.metrics != nil {
				x.metrics.Requests.WithLabelValues(verb, result).Inc()
				x.metrics.Duration.WithLabelValues(verb).Observe(time.Since(start).Seconds())
			}
		}()
		select {
		case x.slots <- struct{}{}:
			defer func() { <-x.slots }()
		default:
			result = "refused"
			x.refused("in_flight")
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("%d scheduler requests in flight, the most this extender serves at once (--max-in-flight): retry", cap(x.slots)), http.StatusServiceUnavailable)
			return
		}
		if x.metrics != nil {
			x.metrics.InFlight.Inc()
			defer x.metrics.InFlight.Dec()
		}
		if r.ContentLength > x.cfg.MaxBodyBytes {
			result = "refused"
			x.tooLarge(w, "body_too_large", x.overBody(fmt.Sprintf("body of %d bytes", r.ContentLength)))
			return
		}
		args, err := decodeArgs(http.MaxBytesReader(w, r.Body, x.cfg.MaxBodyBytes), x.maxNodes())
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			result = "refused"
			x.tooLarge(w, "body_too_large", x.overBody("body"))
			return
		}
		if tm := (*TooManyNodesError)(nil); errors.As(err, &tm) {
			result = "refused"
			x.tooLarge(w, "too_many_nodes", tm.Error())
			return
		}
		if err != nil {
			result = "error"
			http.Error(w, fmt.Sprintf("decode ExtenderArgs: %v: send the JSON kube-scheduler sends to an extender", err), http.StatusBadRequest)
			return
		}
		x.respond(w, verb, do(args), &result)
	}
}

func (x *Extender) maxNodes() int {
	if x.cfg.MaxNodes > 0 {
		return x.cfg.MaxNodes
	}
	return DefaultMaxNodes
}

// tooLarge refuses a request with 413, counted under reason, and closes the connection.
func (x *Extender) tooLarge(w http.ResponseWriter, reason, msg string) {
	x.refused(reason)
	w.Header().Set("Connection", "close") // do not read the rest of a body we refuse
	http.Error(w, msg, http.StatusRequestEntityTooLarge)
}

func (x *Extender) overBody(what string) string {
	return fmt.Sprintf("%s: over the %d-byte bound on one request (--max-body-bytes; sized for 10,000 Node names and the largest Pod)", what, x.cfg.MaxBodyBytes)
}

func (x *Extender) refused(reason string) {
	if x.metrics != nil {
		x.metrics.Refused.WithLabelValues(reason).Inc()
	}
}

// respond writes out as JSON through a pooled buffer (HostPriorityList by hand, see wire.go).
func (x *Extender) respond(w http.ResponseWriter, verb string, out any, result *string) {
	w.Header().Set("Content-Type", "application/json")
	buf := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(buf)
	buf.Reset()
	if l, ok := out.(*extenderv1.HostPriorityList); ok {
		buf.Write(appendPriorities(buf.AvailableBuffer(), *l))
	} else if err := json.NewEncoder(buf).Encode(out); err != nil {
		*result = "error"
		http.Error(w, fmt.Sprintf("encode %s result: %v", verb, err), http.StatusInternalServerError)
		return
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		*result = "error"
		x.log.Warn("write extender response", "verb", verb, "err", err)
	}
}
