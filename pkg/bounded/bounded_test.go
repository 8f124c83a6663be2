package bounded_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/bounded"
)

func TestTextEscapesAndCuts(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain message", "plain message"},
		{"nl\nbell\a\x00", `nl\nbell\a\x00`},
		{"bad\xffutf8", `bad\xffutf8`},
		{`back\slash`, `back\\slash`},
		{"ünïcode ok", "ünïcode ok"},
	} {
		if got := bounded.Text(c.in, 0); got != c.want {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	long := strings.Repeat("\x01", 1<<20)
	got := bounded.Text(long, 100)
	if len(got) > 100+40 || !strings.Contains(got, "more bytes cut") {
		t.Errorf("Text of 1 MiB of control bytes: %d bytes %q", len(got), got)
	}
	err := bounded.Err(errors.Join(io.ErrUnexpectedEOF, errors.New(long)), 64)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(err.Error()) > 64+40 {
		t.Errorf("Err: is %v, %d bytes", errors.Is(err, io.ErrUnexpectedEOF), len(err.Error()))
	}
}

func TestCheckEncoding(t *testing.T) {
	for _, v := range []string{"", "identity", "aws-chunked", "Identity"} {
		if err := bounded.CheckEncoding(v); err != nil {
			t.Errorf("%q refused: %v", v, err)
		}
	}
	for _, v := range []string{"gzip", "br", "deflate", "identity, gzip", "x-gzip", "zstd"} {
		if err := bounded.CheckEncoding(v); !errors.Is(err, bounded.ErrEncoded) {
			t.Errorf("%q: %v, want ErrEncoded", v, err)
		}
	}
}

func TestCheckRange(t *testing.T) {
	ok := []struct {
		status int
		cr     string
		cl     int64
		off, n int64
	}{
		{206, "bytes 10-19/100", 10, 10, 10},
		{206, "bytes 10-19/*", -1, 10, 10},
		{200, "", 10, 0, 10},
	}
	for _, c := range ok {
		if err := bounded.CheckRange(c.status, c.cr, c.cl, c.off, c.n); err != nil {
			t.Errorf("%+v refused: %v", c, err)
		}
	}
	bad := []struct {
		status int
		cr     string
		cl     int64
		off, n int64
	}{
		{206, "bytes 10-29/100", 20, 10, 10}, // longer than asked
		{206, "bytes 10-19/100", 11, 10, 10}, // Content-Length disagrees
		{206, "bytes 0-9/100", 10, 10, 10},   // another range
		{206, "", 10, 10, 10},                // no Content-Range
		{206, "bytes x-y/100", 10, 10, 10},
		{200, "", 100, 0, 10}, // the whole object for a range
		{200, "", 10, 10, 10}, // 200 for a range not at 0
		{200, "", -1, 0, 10},  // 200 of unknown length
		{204, "", 0, 0, 10},   // no content
		{206, "bytes 19-10/100", 10, 10, 10},
	}
	for _, c := range bad {
		if err := bounded.CheckRange(c.status, c.cr, c.cl, c.off, c.n); !errors.Is(err, bounded.ErrRange) {
			t.Errorf("%+v: %v, want ErrRange", c, err)
		}
	}
}

// trickle serves one byte every gap, n bytes in all.
func trickle(gap time.Duration, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for i := 0; i < n; i++ {
			if _, err := w.Write([]byte{'x'}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(gap):
			}
		}
	}
}

func TestStallFiresOnATrickle(t *testing.T) {
	srv := httptest.NewServer(trickle(200*time.Millisecond, 1000))
	defer srv.Close()
	c := &bounded.Client{Inner: srv.Client(), Stall: time.Second}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	var se *bounded.StallError
	if !errors.As(err, &se) || errors.Is(err, context.Canceled) {
		t.Fatalf("read a 1 byte / 200 ms body: %v, want a StallError not wrapping context.Canceled", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("stall of 1s fired after %s", took)
	}
}

func TestStallFiresWaitingForHeaders(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := &bounded.Client{Inner: srv.Client(), Stall: 300 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	start := time.Now()
	_, err := c.Do(req)
	var se *bounded.StallError
	if !errors.As(err, &se) {
		t.Fatalf("a server that never answers: %v, want a StallError", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %s", took)
	}
}

func TestTimeBetweenReadsIsNotAStall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("y", 10)))
	}))
	defer srv.Close()
	c := &bounded.Client{Inner: srv.Client(), Stall: 200 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	time.Sleep(500 * time.Millisecond) // a slow writer downstream, not the server
	b, err := io.ReadAll(resp.Body)
	if err != nil || len(b) != 10 {
		t.Fatalf("read after a pause: %d bytes, %v", len(b), err)
	}
}

func TestErrorBodyCutAndBodyLimit(t *testing.T) {
	big := strings.Repeat("E", 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/err" {
			w.WriteHeader(http.StatusInternalServerError)
		}
		w.Write([]byte(big))
	}))
	defer srv.Close()
	c := &bounded.Client{Inner: srv.Client(), Stall: 5 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/err", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || len(b) != bounded.DefaultErrorBody {
		t.Errorf("error body: %d bytes, %v; want %d and EOF", len(b), err, bounded.DefaultErrorBody)
	}
	req, _ = http.NewRequestWithContext(bounded.WithBodyLimit(context.Background(), 1000), http.MethodGet, srv.URL+"/ok", nil)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, bounded.ErrTooLong) || len(b) != 1000 {
		t.Errorf("limited body: %d bytes, %v; want 1000 and ErrTooLong", len(b), err)
	}
	req, _ = http.NewRequestWithContext(bounded.WithBodyLimit(context.Background(), 1<<20), http.MethodGet, srv.URL+"/ok", nil)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || len(b) != 1<<20 {
		t.Errorf("a body exactly at its limit: %d bytes, %v", len(b), err)
	}
}
