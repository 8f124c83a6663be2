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

// attributes writes a GetObjectAttributes answer listing parts first..first+n-1, truncated with
// marker next when next is not empty.
func attributes(w http.ResponseWriter, first, n int, next string) {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><GetObjectAttributesResponse xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><ObjectParts>`)
	for i := first; i < first+n; i++ {
		fmt.Fprintf(&b, "<Part><PartNumber>%d</PartNumber><Size>5242880</Size><ChecksumCRC32C>AAAAAA==</ChecksumCRC32C></Part>", i)
	}
	if next != "" {
		fmt.Fprintf(&b, "<IsTruncated>true</IsTruncated><NextPartNumberMarker>%s</NextPartNumberMarker>", next)
	}
	b.WriteString("</ObjectParts></GetObjectAttributesResponse>")
	w.Header().Set("Content-Type", "application/xml")
	w.Write([]byte(b.String()))
}

func TestPartListsBounded(t *testing.T) {
	for name, tc := range map[string]struct {
		h       func(req int, w http.ResponseWriter, r *http.Request)
		want    string
		maxReqs int64
	}{
		"endless pages of new parts": {func(req int, w http.ResponseWriter, r *http.Request) {
			attributes(w, (req-1)*1000+1, 1000, fmt.Sprint(req*1000))
		}, "more than 10000 parts", 12},
		"a marker that does not move": {func(req int, w http.ResponseWriter, r *http.Request) {
			attributes(w, 1, 3, "3")
		}, "out of order", 3},
		"an empty truncated page": {func(req int, w http.ResponseWriter, r *http.Request) {
			if req == 1 {
				attributes(w, 1, 2, "2")
				return
			}
			attributes(w, 0, 0, fmt.Sprint(req))
		}, "loops", 3},
		"a checksum of a megabyte": {func(req int, w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/xml")
			fmt.Fprintf(w, `<GetObjectAttributesResponse><ObjectParts><Part><PartNumber>1</PartNumber><Size>1</Size><ChecksumSHA256>%s</ChecksumSHA256></Part></ObjectParts></GetObjectAttributesResponse>`, strings.Repeat("A", 1<<20))
		}, "longer than any S3 checksum", 1},
		"HEAD counting 2^31-1 parts": {func(req int, w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				attributes(w, 0, 0, "") // no part list: the client falls back to HEAD ?partNumber=N
				return
			}
			w.Header().Set("x-amz-mp-parts-count", "2147483647")
			w.Header().Set("Content-Length", "5242880")
		}, "over S3's limit", 2},
		"HEAD whose count changes": {func(req int, w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				attributes(w, 0, 0, "")
				return
			}
			w.Header().Set("x-amz-mp-parts-count", fmt.Sprint(2+req))
			w.Header().Set("Content-Length", "5242880")
		}, "the object changed", 3},
	} {
		t.Run(name, func(t *testing.T) {
			var reqs atomic.Int64
			c := hostile(t, func(w http.ResponseWriter, r *http.Request) {
				tc.h(int(reqs.Add(1)), w, r)
			}, config.S3{})
			parts, err := c.Parts(context.Background(), "b", "m/model.safetensors")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parts = %d parts, %v; want an error saying %q", len(parts), err, tc.want)
			}
			if n := reqs.Load(); n > tc.maxReqs {
				t.Errorf("%d requests before the answer was refused, want at most %d", n, tc.maxReqs)
			}
		})
	}
}

func TestPartListsOfAGoodStoreRead(t *testing.T) {
	c := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-amz-part-number-marker") == "" {
			attributes(w, 1, 1000, "1000")
			return
		}
		attributes(w, 1001, 500, "")
	}, config.S3{})
	parts, err := c.Parts(context.Background(), "b", "m/model.safetensors")
	if err != nil || len(parts) != 1500 || parts[1499].Number != 1500 || parts[0].Checksum != "AAAAAA==" {
		t.Fatalf("Parts = %d parts, %v; want 1,500 numbered 1..1500 with their checksums", len(parts), err)
	}
}
