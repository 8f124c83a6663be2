package extender

import (
	"bytes"
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

// TestOversizedBodiesAreRefusedWithinAHeapBound sends what the probe of issue 25 sent (8 concurrent
// 57 MiB bodies, then 3 GB of heap): each is refused with 413 and the peak heap (garbage included)
// grows by under what DefaultMaxInFlight documents: 3× DefaultMaxBodyBytes per request in flight.
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
			resp, err := http.Post(srv.URL+"/prioritize", "application/json", &namesBody{left: 57 << 20})
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
	grew := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("8 concurrent 57 MiB bodies: peak heap in use %d MiB above the start", grew>>20)
	if bound := int64(8 * 3 * DefaultMaxBodyBytes); grew > bound {
		t.Errorf("heap grew by %d MiB, the bound is %d MiB", grew>>20, bound>>20)
	}
	if got := testutil.ToFloat64(m.Refused.WithLabelValues("body_too_large")); got < 1 {
		t.Errorf("warmd_extender_refused_total{reason=body_too_large} = %v", got)
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
	} {
		if a, err := decodeArgs(strings.NewReader(body)); err == nil {
			t.Errorf("decodeArgs(%s) = %+v, want an error", body, a)
		}
	}
	a, err := decodeArgs(strings.NewReader(`{"Pod":{"metadata":{"name":"p"}},"Nodes":null,"nodenames":["a","b"],"Extra":{"x":[1,2]}}`))
	if err != nil || a.Pod == nil || a.Pod.Name != "p" || a.NodeNames == nil || len(*a.NodeNames) != 2 || a.Nodes != nil {
		t.Errorf("decodeArgs = %+v, %v", a, err)
	}
}
