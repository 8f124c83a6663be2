package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/bounded"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
)

// hostile starts an httptest S3 stub answering every request with h, and a client for it.
func hostile(t *testing.T, h http.HandlerFunc, cfg config.S3) *objstore.S3 {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg.Endpoint, cfg.UsePathStyle = srv.URL, aws.Bool(true)
	c, err := objstore.NewS3(context.Background(), cfg, objstore.Options{
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
		Backoff:     objstore.Backoff{Attempts: 2, Base: time.Millisecond, Max: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// page writes a ListObjectsV2 page of keys.
func page(w http.ResponseWriter, keys []string, next string) {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>`)
	for _, k := range keys {
		fmt.Fprintf(&b, "<Contents><Key>%s</Key><Size>1</Size></Contents>", k)
	}
	if next != "" {
		fmt.Fprintf(&b, "<IsTruncated>true</IsTruncated><NextContinuationToken>%s</NextContinuationToken>", next)
	}
	b.WriteString("</ListBucketResult>")
	w.Header().Set("Content-Type", "application/xml")
	w.Write([]byte(b.String()))
}

func TestListingEndlessNewKeysStopsAtTheBound(t *testing.T) {
	var sent atomic.Int64
	c := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		keys := make([]string, 1000)
		base := sent.Add(1000) - 1000
		for i := range keys {
			keys[i] = fmt.Sprintf("m/k%09d", base+int64(i))
		}
		page(w, keys, fmt.Sprint(base+1000))
	}, config.S3{MaxListKeys: 5000})
	_, err := c.List(context.Background(), "b", "m/")
	if !errors.Is(err, objstore.ErrListing) || !strings.Contains(err.Error(), "s3.maxListKeys") {
		t.Fatalf("endless listing: %v, want ErrListing naming s3.maxListKeys", err)
	}
	if n := sent.Load(); n > 6000 {
		t.Errorf("read %d keys for a bound of 5000", n)
	}
}

func TestListingLoopsDetected(t *testing.T) {
	for name, next := range map[string]func(int) string{
		"same token":           func(int) string { return "again" },
		"new token, same keys": func(i int) string { return fmt.Sprint(i) },
	} {
		t.Run(name, func(t *testing.T) {
			var pages atomic.Int64
			c := hostile(t, func(w http.ResponseWriter, r *http.Request) {
				page(w, []string{"m/a", "m/b"}, next(int(pages.Add(1))))
			}, config.S3{})
			_, err := c.List(context.Background(), "b", "m/")
			if !errors.Is(err, objstore.ErrListing) || !strings.Contains(err.Error(), "loops") {
				t.Fatalf("%v, want a loop refused", err)
			}
			if n := pages.Load(); n > 3 {
				t.Errorf("the loop took %d pages to see", n)
			}
		})
	}
}

func TestHugeErrorBodyIsCut(t *testing.T) {
	var sent atomic.Int64
	c := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		if r.Method == http.MethodHead {
			return
		}
		chunk := bytes.Repeat([]byte("<Error>\x1b[31mAAAA"), 4096)
		for sent.Load() < 300<<20 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			sent.Add(int64(len(chunk)))
		}
	}, config.S3{})
	_, err := c.Head(context.Background(), "b", "k")
	_, err = c.GetRange(context.Background(), "b", "k", 0, 10, &bytes.Buffer{})
	if err == nil {
		t.Fatal("a 500 was taken")
	}
	if len(err.Error()) > 2048 || strings.Contains(err.Error(), "\x1b") {
		t.Errorf("error text %d bytes, escapes raw bytes: %q", len(err.Error()), err.Error()[:min(200, len(err.Error()))])
	}
	if n := sent.Load(); n > 100<<20 {
		t.Errorf("the server got to send %d MB of an error body", n>>20)
	}
}

func TestRangeAnswersChecked(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"gzip": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Range", "bytes 0-9/10")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(make([]byte, 10))
		},
		"longer": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Range", "bytes 0-9/100")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(make([]byte, 10)) // chunked: Flush before
			w.(http.Flusher).Flush()
			w.Write(make([]byte, 90))
		},
		"other range": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Range", "bytes 5-14/100")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(make([]byte, 10))
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := hostile(t, h, config.S3{})
			var buf bytes.Buffer
			_, err := c.GetRange(context.Background(), "b", "k", 0, 10, &buf)
			if !errors.Is(err, bounded.ErrEncoded) && !errors.Is(err, bounded.ErrTooLong) && !errors.Is(err, bounded.ErrRange) {
				t.Fatalf("%v, want the answer refused", err)
			}
			if err := c.ReadRange(context.Background(), "b", "k", 0, make([]byte, 10)); err == nil {
				t.Fatal("ReadRange took it")
			}
		})
	}
}

func TestStallTimeoutFires(t *testing.T) {
	c := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		var from int
		fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-", &from)
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-99/100", from))
		w.Header().Set("Content-Length", fmt.Sprint(100-from))
		w.WriteHeader(http.StatusPartialContent)
		for range 100 - from {
			w.Write([]byte{1})
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}, config.S3{StallTimeout: metav1.Duration{Duration: time.Second}})
	start := time.Now()
	_, err := c.GetRange(context.Background(), "b", "k", 0, 100, &bytes.Buffer{})
	var se *bounded.StallError
	if !errors.As(err, &se) {
		t.Fatalf("%v, want a stall", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("two tries of a 1s stall took %s", took)
	}
}
