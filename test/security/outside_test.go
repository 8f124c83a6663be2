package security

// Answers from outside that never end, never arrive, arrive encoded, or come from a server whose
// certificate does not verify. Each case puts a hostile front before the stub bucket (the front
// answers what the case is about and passes everything else to the stub), runs the real
// `warmd prefetch weights` on it, and checks what the user sees (the exit code and an error that
// names the bound and the fix), what it cost (peak RSS and wall time, each a threshold of this
// test), that nothing was published and that the canary is untouched. The figures are logged
// (go test -v) for docs/security.md and the note.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// front serves before b's stub: hook answers the requests it takes (returning true), the stub the
// rest. tls serves it over HTTPS with httptest's self-signed certificate, which warmd must not trust.
// It returns the endpoint and a count of the connections clients opened to it.
func front(t *testing.T, b *Bucket, tls bool, hook func(w http.ResponseWriter, r *http.Request) bool) (string, *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(b.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hook == nil || !hook(w, r) {
			proxy.ServeHTTP(w, r)
		}
	})
	conns := new(atomic.Int64)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv.URL, conns
}

// isList reports whether r is a ListObjectsV2 request.
func isList(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2"
}

// isGetObject reports whether r fetches the bytes of key (path-style: /bucket/key).
func isGetObject(r *http.Request, b *Bucket, key string) bool {
	return r.Method == http.MethodGet && strings.TrimPrefix(r.URL.Path, "/"+b.Name+"/") == key
}

// listPage writes a ListObjectsV2 page of keys; next, when set, says there are more behind it.
func listPage(w http.ResponseWriter, bucket, prefix string, keys []string, size int, next string) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>%s</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys>`,
		bucket, prefix, len(keys))
	for _, k := range keys {
		fmt.Fprintf(&buf, `<Contents><Key>%s</Key><LastModified>2023-11-14T22:13:20Z</LastModified><ETag>"0"</ETag><Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>`, k, size)
	}
	if next != "" {
		fmt.Fprintf(&buf, `<IsTruncated>true</IsTruncated><NextContinuationToken>%s</NextContinuationToken>`, next)
	} else {
		buf.WriteString(`<IsTruncated>false</IsTruncated>`)
	}
	buf.WriteString(`</ListBucketResult>`)
	w.Header().Set("Content-Type", "application/xml")
	w.Write(buf.Bytes())
}

// outcome is what one `warmd prefetch weights` run against a hostile answer did and cost.
type outcome struct {
	Result
	RSS  int64 // peak resident set, bytes
	Took time.Duration
}

// prefetchFrom runs `warmd prefetch weights --config` for one model at endpoint, with extra s3
// settings (YAML flow entries, e.g. "stallTimeout: 2s"), and returns what it did and cost. RSS is
// warmd's own peak (rssCommand) above the same command refusing a one-line config mistake, so
// the bound is on what the hostile answer cost, not on the binary's size.
func prefetchFrom(t *testing.T, w *World, b *Bucket, endpoint, s3extra string) outcome {
	t.Helper()
	s3 := fmt.Sprintf("{endpoint: %s", quoteYAML(endpoint))
	if s3extra != "" {
		s3 += ", " + s3extra
	}
	base := runPrefetch(t, w, w.Config(map[string]string{"weights": "{concurrency: -1}"}))
	if base.Code != 2 {
		t.Fatalf("the baseline run (a config mistake) exited %d, want 2:\n%s", base.Code, tail(base.Output(), 2000))
	}
	cfg := w.Config(map[string]string{"s3": s3 + "}", "models": ModelsSection(map[string]string{"name": "sec/outside", "source": b.URL("m/")})})
	o := runPrefetch(t, w, cfg)
	o.RSS -= base.RSS
	t.Logf("exit %d, peak RSS %d MiB above the baseline's %d MiB, %s", o.Code, o.RSS>>20, base.RSS>>20, o.Took.Round(100*time.Millisecond))
	return o
}

// runPrefetch runs `warmd prefetch weights --config cfg` and returns what it did, its peak RSS and
// its wall time.
func runPrefetch(t *testing.T, w *World, cfg string) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd, peak := rssCommand(t, ctx, warmdBin, "prefetch", "weights", "--config", cfg, "--progress", "none", "-o", "json")
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(cmd.Env, w.Env...)
	cmd.Dir = w.Work
	start := time.Now()
	err := cmd.Run()
	o := outcome{Result: Result{Stdout: out.String(), Stderr: errb.String()}, Took: time.Since(start)}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run warmd: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("warmd prefetch weights did not finish in 3 minutes:\n%s", tail(o.Output(), 3000))
	}
	o.Code = cmd.ProcessState.ExitCode()
	o.RSS = peak()
	return o
}

// refused checks the common outcome of a refused answer: exit 1 within took, at most rss bytes of
// peak RSS above the baseline, the error naming want, output bounded (no hostile body echoed),
// nothing published, canary intact.
func refused(t *testing.T, w *World, o outcome, want string, took time.Duration, rss int64) {
	t.Helper()
	if o.Code != 1 {
		t.Errorf("exit %d, want 1:\n%s", o.Code, tail(o.Output(), 3000))
	}
	if !strings.Contains(o.Output(), want) {
		t.Errorf("the error does not say %q:\n%s", want, tail(o.Output(), 3000))
	}
	if o.Took > took {
		t.Errorf("took %s, bound %s", o.Took, took)
	}
	if o.RSS > rss {
		t.Errorf("peak RSS %d MiB above the baseline, bound %d MiB", o.RSS>>20, rss>>20)
	}
	if n := len(o.Output()); n > 64<<10 {
		t.Errorf("printed %d bytes: an answer from outside reached the output uncut", n)
	}
	if snaps, _ := filepath.Glob(filepath.Join(w.DataDir, "weights", "models--sec--outside", "snapshots", "*")); len(snaps) != 0 {
		t.Errorf("published %v from a refused answer", snaps)
	}
	w.Check()
}

// outsideWorld is a case's world and stub bucket holding a small loadable model under m/.
func outsideWorld(t *testing.T) (*World, *Bucket, map[string][]byte) {
	t.Helper()
	w, b := NewWorld(t), StubBucket(t)
	w.Env = append(w.Env, b.Env...)
	files := SmallModel(t)
	b.PutModel("m/", files)
	return w, b, files
}

// listFront is a front that answers every listing with page(n) for the n-th page asked (keys of
// 1 MiB each, and the token that says there are more); it counts the pages.
func listFront(t *testing.T, b *Bucket, page func(n int64) (keys []string, next string)) (string, *atomic.Int64) {
	t.Helper()
	pages := new(atomic.Int64)
	ep, _ := front(t, b, false, func(rw http.ResponseWriter, r *http.Request) bool {
		if !isList(r) {
			return false
		}
		keys, next := page(pages.Add(1))
		listPage(rw, b.Name, "m/", keys, 1<<20, next)
		return true
	})
	return ep, pages
}

// TestS3ListingWithoutEnd: a store that lists 1,000 fresh keys per page and always says there are
// more is stopped at s3.maxListKeys (here 20,000), with memory bounded by the keys kept, not fetched.
func TestS3ListingWithoutEnd(t *testing.T) {
	w, b, _ := outsideWorld(t)
	ep, pages := listFront(t, b, func(n int64) ([]string, string) {
		keys := make([]string, 1000)
		for i := range keys {
			keys[i] = fmt.Sprintf("m/shard-%06d-%04d.safetensors", n, i)
		}
		return keys, "t" + strconv.FormatInt(n, 10)
	})
	o := prefetchFrom(t, w, b, ep, "maxListKeys: 20000")
	refused(t, w, o, "s3.maxListKeys", time.Minute, 64<<20)
	t.Logf("%d listing pages read", pages.Load())
	if p := pages.Load(); p > 30 {
		t.Errorf("%d pages read for a bound of 20,000 keys", p)
	}
	if b.Stub.Fetched("m/model.safetensors") {
		t.Error("a file was fetched from a listing that was refused")
	}
}

// TestS3ListingTokenLoop: a store whose continuation token comes back again is refused as a loop
// within a few pages, not after s3.maxListPages.
func TestS3ListingTokenLoop(t *testing.T) {
	w, b, _ := outsideWorld(t)
	ep, pages := listFront(t, b, func(n int64) ([]string, string) {
		return []string{fmt.Sprintf("m/f-%06d.safetensors", n)}, "same"
	})
	o := prefetchFrom(t, w, b, ep, "")
	refused(t, w, o, "loops", 30*time.Second, 64<<20)
	t.Logf("%d listing pages read", pages.Load())
	if p := pages.Load(); p > 4 {
		t.Errorf("%d pages read before the loop was refused", p)
	}
}

// TestS3HugeErrorBody: an object whose GET answers 500 with a 300 MB body (streamed, never held by
// the server either) fails with the error cut, read to a few KiB per attempt.
func TestS3HugeErrorBody(t *testing.T) {
	w, b, _ := outsideWorld(t)
	var sent atomic.Int64
	ep, _ := front(t, b, false, func(rw http.ResponseWriter, r *http.Request) bool {
		if !isGetObject(r, b, "m/model.safetensors") {
			return false
		}
		rw.Header().Set("Content-Type", "application/xml")
		rw.WriteHeader(http.StatusInternalServerError)
		rw.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>`))
		line := bytes.Repeat([]byte("SECRET-ISH-HOSTILE-TEXT "), 1<<12) // 96 KiB
		for i := 0; i < 300<<20/len(line); i++ {
			n, err := rw.Write(line)
			sent.Add(int64(n))
			if err != nil {
				return true // the client hung up: what warmd should do
			}
		}
		return true
	})
	o := prefetchFrom(t, w, b, ep, "")
	refused(t, w, o, "500", time.Minute, 64<<20)
	if strings.Count(o.Output(), "SECRET-ISH-HOSTILE-TEXT") > 400 {
		t.Errorf("the error body was printed at length")
	}
	t.Logf("the server got %d MiB of its error bodies out before warmd hung up", sent.Load()>>20)
}

// TestS3StalledBody: an object that trickles one byte every 2 s fails after s3.stallTimeout (2 s
// here) per attempt instead of downloading for hours.
func TestS3StalledBody(t *testing.T) {
	w, b, files := outsideWorld(t)
	body := files["model.safetensors"]
	ep, _ := front(t, b, false, func(rw http.ResponseWriter, r *http.Request) bool {
		if !isGetObject(r, b, "m/model.safetensors") {
			return false
		}
		// Honour the range (a resumed attempt asks for the rest), then trickle it.
		off, end := 0, len(body)-1
		fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &off, &end)
		if off < 0 || end >= len(body) || off > end {
			rw.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return true
		}
		rw.Header().Set("Content-Length", strconv.Itoa(end-off+1))
		rw.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, end, len(body)))
		rw.WriteHeader(http.StatusPartialContent)
		for i := off; i <= end; i++ {
			if _, err := rw.Write(body[i : i+1]); err != nil {
				return true
			}
			rw.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return true
			case <-time.After(2 * time.Second):
			}
		}
		return true
	})
	o := prefetchFrom(t, w, b, ep, "stallTimeout: 2s")
	refused(t, w, o, "stalled", 120*time.Second, 64<<20)
}

// TestS3CompressedBody: an object served with Content-Encoding: gzip is refused, never decoded
// (a decoded body is not the bytes the checksum covers, and a bomb would be unbounded).
func TestS3CompressedBody(t *testing.T) {
	w, b, files := outsideWorld(t)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(files["model.safetensors"])
	zw.Close()
	ep, _ := front(t, b, false, func(rw http.ResponseWriter, r *http.Request) bool {
		if !isGetObject(r, b, "m/model.safetensors") {
			return false
		}
		rw.Header().Set("Content-Encoding", "gzip")
		rw.Header().Set("Content-Length", strconv.Itoa(zipped.Len()))
		rw.WriteHeader(http.StatusOK)
		rw.Write(zipped.Bytes())
		return true
	})
	o := prefetchFrom(t, w, b, ep, "")
	refused(t, w, o, "Content-Encoding", time.Minute, 64<<20)
}

// TestS3BadTLSCertificate: an HTTPS endpoint whose certificate does not verify is refused at once,
// by name and with the fix, and not retried: warmd never falls back to an unverified connection.
func TestS3BadTLSCertificate(t *testing.T) {
	w, b, _ := outsideWorld(t)
	ep, conns := front(t, b, true, nil)
	o := prefetchFrom(t, w, b, ep, "")
	refused(t, w, o, "AWS_CA_BUNDLE", 20*time.Second, 64<<20)
	if n := conns.Load(); n < 1 || n > 2 {
		t.Errorf("%d connections to an endpoint whose certificate does not verify; want 1 (refused, not retried)", n)
	}
}
