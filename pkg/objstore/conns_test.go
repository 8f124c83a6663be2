package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
)

// TestConnectionsAreReused: one request after another goes over one kept-alive connection, whatever
// the request (HEAD, a listing, ranged reads into a buffer and into a writer, a whole GET, a PUT, a
// 404). Real S3 keeps connections alive; a client that dials per request pays a TCP (and on S3 a TLS)
// handshake per chunk and allocates two connection buffers each time.
func TestConnectionsAreReused(t *testing.T) {
	obj := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16)
	var dialed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch {
		case r.Method == http.MethodPut:
			w.Header().Set("ETag", `"e"`)
		case r.URL.Query().Has("list-type"):
			page(w, []string{"k"}, "")
		case !strings.HasSuffix(r.URL.Path, "/k"):
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `<Error><Code>NoSuchKey</Code><Message>none</Message></Error>`)
		default:
			body, status := obj, http.StatusOK
			if rng := r.Header.Get("Range"); rng != "" {
				var from, to int
				if _, err := fmt.Sscanf(rng, "bytes=%d-%d", &from, &to); err != nil {
					t.Errorf("range %q: %v", rng, err)
				}
				body, status = obj[from:to+1], http.StatusPartialContent
				w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, len(obj)))
			}
			w.Header().Set("ETag", `"e"`)
			w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(status)
			if r.Method != http.MethodHead {
				w.Write(body)
			}
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := objstore.NewS3(context.Background(), config.S3{Endpoint: srv.URL, UsePathStyle: aws.Bool(true)}, objstore.Options{
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	buf := make([]byte, 4096)
	for i := range 3 {
		if _, err := c.Head(ctx, "b", "k"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Head(ctx, "b", "missing"); err == nil {
			t.Fatal("HEAD of a missing key succeeded")
		}
		if _, err := c.List(ctx, "b", ""); err != nil {
			t.Fatal(err)
		}
		if err := c.ReadRange(ctx, "b", "k", int64(i)*4096, buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, obj[i*4096:(i+1)*4096]) {
			t.Fatal("ReadRange returned the wrong bytes")
		}
		if n, err := c.GetRange(ctx, "b", "k", 100, 50000, io.Discard); err != nil || n != 50000 {
			t.Fatalf("GetRange: %d bytes, %v", n, err)
		}
		if n, err := c.Get(ctx, "b", "k", io.Discard); err != nil || n != int64(len(obj)) {
			t.Fatalf("Get: %d bytes, %v", n, err)
		}
		if err := c.Put(ctx, "b", "p", bytes.NewReader(obj), int64(len(obj)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := dialed.Load(); n != 1 {
		t.Errorf("21 requests one after another opened %d connections, want 1 (each request must leave its connection reusable)", n)
	}
}
