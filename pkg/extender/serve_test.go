package extender

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"warmd.io/warmd/pkg/metrics"
)

func boundedServer(t *testing.T, cfg Config) (*httptest.Server, *metrics.Extender) {
	t.Helper()
	ix := NewIndex()
	m := metrics.NewExtender(prometheus.NewRegistry(), ix, nil)
	srv := httptest.NewServer(New(cfg, ix, m, nil).Handler())
	t.Cleanup(srv.Close)
	return srv, m
}

// namesBody streams {"Pod":null,"NodeNames":["n-000000",…]} of about size bytes without a
// Content-Length, so the server must stop reading it itself.
type namesBody struct{ left, i int }

func (b *namesBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	var chunk []byte
	if b.i == 0 {
		chunk = []byte(`{"Pod":null,"NodeNames":["n-000000"`)
	}
	for len(chunk) < len(p)-16 && b.left-len(chunk) > 16 {
		b.i++
		chunk = fmt.Appendf(chunk, `,"n-%06d"`, b.i)
	}
	if b.left-len(chunk) <= 16 {
		chunk = append(chunk, "]}"...)
	}
	n := copy(p, chunk)
	b.left -= n
	return n, nil
}

// podBody streams {"Pod":{"metadata":{"annotations":{"a":"xxxx… of size bytes: one member larger
// than the body bound, which only the byte count can refuse.
type podBody struct{ left, i int }

func (b *podBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	n := 0
	if b.i == 0 {
		n = copy(p, `{"Pod":{"metadata":{"annotations":{"a":"`)
		b.i = n
	}
	for ; n < len(p) && n < b.left; n++ {
		p[n] = 'x'
	}
	b.left -= n
	return n, nil
}

// TestOversizedBodiesAreRefusedWithinAHeapBound sends what the probe of issue 25 sent (8 concurrent
// 57 MiB bodies, then 3 GB of heap), in both shapes a body can be too large in: many short names
// (refused at the name past DefaultMaxNodes) and one member past the body bound (refused at the
// byte past it). Each is refused with 413 and the peak heap (garbage, and this test's own client,
// included) grows by under what DefaultMaxInFlight documents: 3× DefaultMaxBodyBytes per request in
// flight.
func TestOversizedBodiesAreRefusedWithinAHeapBound(t *testing.T) {
	srv, m := boundedServer(t, Config{})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Go(func() {
			var body io.Reader = &namesBody{left: 57 << 20}
			if i%2 == 1 {
				body = &podBody{left: 57 << 20}
			}
			resp, err := http.Post(srv.URL+"/prioritize", "application/json", body)
			if err != nil {
				// The server may close the connection while the client still writes: still refused.
				codes[i] = http.StatusRequestEntityTooLarge
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	close(stop)
	for i, c := range codes {
		if c != http.StatusRequestEntityTooLarge {
			t.Errorf("body %d: %d, want 413", i, c)
		}
	}
	for _, reason := range []string{"body_too_large", "too_many_nodes"} {
		if got := testutil.ToFloat64(m.Refused.WithLabelValues(reason)); got < 4 {
			t.Errorf("warmd_extender_refused_total{reason=%s} = %v, want 4 (one per body of that shape)", reason, got)
		}
	}
	grew := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("8 concurrent 57 MiB bodies: peak heap in use %d MiB above the start", grew>>20)
	if bound := int64(8 * 3 * DefaultMaxBodyBytes); grew > bound {
		t.Errorf("heap grew by %d MiB, the bound is %d MiB", grew>>20, bound>>20)
	}
	// A declared Content-Length over the bound is refused before a byte of the body is read.
	resp, err := http.Post(srv.URL+"/filter", "application/json", bytes.NewReader(make([]byte, DefaultMaxBodyBytes+1)))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("declared oversize body: %d, want 413", resp.StatusCode)
		}
	}
}

// TestBodyOfTheLargestClusterIsServed: 10,000 names of 253 bytes and a Pod fit the default bound.
func TestBodyOfTheLargestClusterIsServed(t *testing.T) {
	srv, _ := boundedServer(t, Config{})
	names := make([]string, DefaultMaxNodes)
	for i := range names {
		names[i] = fmt.Sprintf("%05d%s", i, strings.Repeat("n", 248))
	}
	body := argsBody(t, vllmPod(m7b), nil, names)
	resp, err := http.Post(srv.URL+"/prioritize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("%d-byte body of %d longest names: %d, want 200", len(body), len(names), resp.StatusCode)
	}
	names = append(names, "one-more")
	resp, err = http.Post(srv.URL+"/prioritize", "application/json", bytes.NewReader(argsBody(t, nil, nil, names)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("%d names: %d, want 413", len(names), resp.StatusCode)
	}
}

// TestRequestsInFlightAreBounded: with 2 slots held by bodies still arriving, a third request gets
// 503 at once and is counted; once the two finish, requests are served again.
func TestRequestsInFlightAreBounded(t *testing.T) {
	srv, m := boundedServer(t, Config{MaxInFlight: 2})
	var writers []*io.PipeWriter
	var wg sync.WaitGroup
	for range 2 {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		wg.Go(func() {
			resp, err := http.Post(srv.URL+"/filter", "application/json", pr)
			if err == nil {
				resp.Body.Close()
			}
		})
		if _, err := pw.Write([]byte(`{"NodeNames":["a"`)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(m.InFlight) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two slow requests never got in flight")
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := http.Post(srv.URL+"/prioritize", "application/json", strings.NewReader(`{"NodeNames":["a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("third request: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if got := testutil.ToFloat64(m.Refused.WithLabelValues("in_flight")); got != 1 {
		t.Errorf("warmd_extender_refused_total{reason=in_flight} = %v, want 1", got)
	}
	for _, pw := range writers {
		_, _ = pw.Write([]byte(`]}`))
		pw.Close()
	}
	wg.Wait()
	resp, err = http.Post(srv.URL+"/prioritize", "application/json", strings.NewReader(`{"NodeNames":["a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the slots freed: %d, want 200", resp.StatusCode)
	}
}

func TestDecodeArgsRefusesWhatTheSchedulerNeverSends(t *testing.T) {
	for _, body := range []string{
		`{"NodeNames":["a"],"NodeNames":["b"]}`,
		`{"Pod":null,"pod":null}`,
		`{"NodeNames":["a"]} {}`,
		`["a"]`,
		`{"NodeNames":["a"]`,
		`{"NodeNames":[1]}`,
		`null`,
		`{"Nodes":{"items":[1]}}`,
		`{"Nodes":{"items":[],"Items":[]}}`,
		`{"Nodes":[]}`,
	} {
		if a, err := decodeArgs(strings.NewReader(body), DefaultMaxNodes); err == nil {
			t.Errorf("decodeArgs(%s) = %+v, want an error", body, a)
		}
	}
	a, err := decodeArgs(strings.NewReader(`{"Pod":{"metadata":{"name":"p"}},"Nodes":null,"nodenames":["a","b"],"Extra":{"x":[1,2]}}`), DefaultMaxNodes)
	if err != nil || a.Pod == nil || a.Pod.Name != "p" || a.NodeNames == nil || len(*a.NodeNames) != 2 || a.Nodes != nil {
		t.Errorf("decodeArgs = %+v, %v", a, err)
	}
}

// TestDecodeArgsStopsAtTheCandidateBound: the name or Node past maxNodes ends the read with
// *TooManyNodesError, whatever follows it (here, an unterminated body); maxNodes of them are served.
func TestDecodeArgsStopsAtTheCandidateBound(t *testing.T) {
	for _, tt := range []struct{ name, ok, over string }{
		{"NodeNames", `{"NodeNames":["a","b"]}`, `{"NodeNames":["a","b","c",`},
		{"Nodes", `{"Nodes":{"kind":"NodeList","metadata":{},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}}`,
			`{"Nodes":{"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}},{"metadata":`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := decodeArgs(strings.NewReader(tt.ok), 2)
			if err != nil {
				t.Fatalf("2 candidates under a bound of 2: %v", err)
			}
			var got []string
			if a.NodeNames != nil {
				got = *a.NodeNames
			} else if a.Nodes != nil {
				for _, n := range a.Nodes.Items {
					got = append(got, n.Name)
				}
			}
			if strings.Join(got, ",") != "a,b" {
				t.Errorf("candidates %q, want a,b", got)
			}
			_, err = decodeArgs(strings.NewReader(tt.over), 2)
			if tm := (*TooManyNodesError)(nil); !errors.As(err, &tm) || tm.Max != 2 {
				t.Errorf("3 candidates under a bound of 2: %v, want a *TooManyNodesError", err)
			}
		})
	}
}
