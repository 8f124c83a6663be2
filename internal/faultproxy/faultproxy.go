// Package faultproxy is a loopback HTTP proxy for tests that injects the faults object stores
// produce: 503 SlowDown answers, bodies cut mid-stream (connection resets, short reads) and flipped
// bytes. It forwards requests unchanged (the Host header included, so S3 signatures stay valid) and
// counts the body bytes it served, so tests can assert how much was refetched.
//
// It owns nothing but the fault injection; it listens only on 127.0.0.1.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"
)

// Faults to inject; each counter is consumed by the matching requests that follow.
type Faults struct {
	// SlowDown answers the next N matching requests with 503 SlowDown (S3's throttling reply).
	SlowDown int
	// Reset cuts the next N matching response bodies after half their length.
	Reset int
	// Corrupt flips one byte in the middle of the next N matching response bodies.
	Corrupt int
	// Match selects requests; nil matches GETs of object bytes (not listings or HEADs).
	Match func(*http.Request) bool
}

// Proxy is a running fault proxy.
type Proxy struct {
	// URL is the proxy's base URL (http://127.0.0.1:PORT); point the client's endpoint here.
	URL string

	srv      *http.Server
	ln       net.Listener
	mu       sync.Mutex
	faults   Faults
	served   atomic.Int64
	paths    map[string]*atomic.Int64 // body bytes by request path (under mu)
	requests atomic.Int64
	injected atomic.Int64
	limiter  atomic.Pointer[rate.Limiter]
}

// SetRate caps the bytes per second of every response body together (an origin with a bandwidth cap,
// as an on-prem S3 or a rate-limited prefix is); 0 lifts the cap.
func (p *Proxy) SetRate(bytesPerSecond int64) {
	if bytesPerSecond <= 0 {
		p.limiter.Store(nil)
		return
	}
	p.limiter.Store(rate.NewLimiter(rate.Limit(bytesPerSecond), int(min(bytesPerSecond, 256<<10))))
}

// limitedBody waits for the proxy's cap before handing out bytes.
type limitedBody struct {
	io.ReadCloser
	p   *Proxy
	ctx context.Context
}

func (b *limitedBody) Read(buf []byte) (int, error) {
	l := b.p.limiter.Load()
	if l == nil {
		return b.ReadCloser.Read(buf)
	}
	buf = buf[:min(len(buf), l.Burst())]
	n, err := b.ReadCloser.Read(buf)
	if n > 0 {
		if werr := l.WaitN(b.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// Start proxies to target (http://127.0.0.1:PORT).
func Start(target string) (*Proxy, error) { return StartOn("127.0.0.1:0", target) }

// StartOn is Start listening on addr: a test world with one address per node (127.0.0.x and a port
// every node shares) puts a faulty node's proxy where the node would be.
func StartOn(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Serve(ln, target)
}

// Serve is Start on a listener the caller opened: one inside a network namespace of its own puts the
// origin behind a link (internal/testenv/links), while the proxy's own requests to target still leave
// from the host's loopback.
func Serve(ln net.Listener, target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		ln.Close()
		return nil, fmt.Errorf("fault proxy target %q is not a URL", target)
	}
	p := &Proxy{URL: "http://" + ln.Addr().String(), ln: ln}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(r *http.Response) error {
		r.Body = &countingBody{ReadCloser: &limitedBody{ReadCloser: r.Body, p: p, ctx: r.Request.Context()}, n: &p.served,
			path: p.pathCounter(r.Request.URL.Path)}
		if r.Request.Method != http.MethodGet || r.StatusCode/100 != 2 || r.ContentLength < 2 {
			return nil
		}
		if !p.take(r.Request, func(f *Faults) *int { return &f.Reset }) {
			if p.take(r.Request, func(f *Faults) *int { return &f.Corrupt }) {
				r.Body = &corruptBody{ReadCloser: r.Body, at: r.ContentLength / 2}
			}
			return nil
		}
		r.Body = &cutBody{ReadCloser: r.Body, left: r.ContentLength / 2}
		return nil
	}
	rp.ErrorLog = log.New(io.Discard, "", 0) // cut bodies are the point, not news
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		if p.take(r, func(f *Faults) *int { return &f.SlowDown }) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go p.srv.Serve(ln)
	return p, nil
}

// Inject replaces the pending faults.
func (p *Proxy) Inject(f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
}

// Pending returns the faults not yet consumed.
func (p *Proxy) Pending() Faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults
}

// BytesServed counts response body bytes sent to clients.
func (p *Proxy) BytesServed() int64 { return p.served.Load() }

// BytesServedFor counts response body bytes sent for request paths ending in suffix (".tar.zst":
// the bundle objects alone, not the indexes and manifests read next to them).
func (p *Proxy) BytesServedFor(suffix string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for path, c := range p.paths {
		if strings.HasSuffix(path, suffix) {
			n += c.Load()
		}
	}
	return n
}

func (p *Proxy) pathCounter(path string) *atomic.Int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paths == nil {
		p.paths = map[string]*atomic.Int64{}
	}
	c, ok := p.paths[path]
	if !ok {
		c = new(atomic.Int64)
		p.paths[path] = c
	}
	return c
}

// Requests counts requests received.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Injected counts faults injected.
func (p *Proxy) Injected() int64 { return p.injected.Load() }

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

func (p *Proxy) take(r *http.Request, counter func(*Faults) *int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := counter(&p.faults)
	if *c <= 0 {
		return false
	}
	match := p.faults.Match
	if match == nil {
		match = func(r *http.Request) bool {
			return r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "" && r.URL.Query().Get("attributes") == ""
		}
	}
	if !match(r) {
		return false
	}
	*c--
	p.injected.Add(1)
	return true
}

type countingBody struct {
	io.ReadCloser
	n, path *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	b.path.Add(int64(n))
	return n, err
}

// errCut makes the reverse proxy abort the response, so the client sees a reset/short body.
var errCut = errors.New("faultproxy: body cut")

type cutBody struct {
	io.ReadCloser
	left int64
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errCut
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

type corruptBody struct {
	io.ReadCloser
	at, pos int64
}

func (b *corruptBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.at >= b.pos && b.at < b.pos+int64(n) {
		p[b.at-b.pos] ^= 0xff
	}
	b.pos += int64(n)
	return n, err
}
