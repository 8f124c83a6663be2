package peer_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/peer"
	peersrc "warmd.io/warmd/pkg/prefetch/weights/source/peer"
	s3src "warmd.io/warmd/pkg/prefetch/weights/source/s3"
)

// A peer whose answer is not the range asked — encoded, longer, shorter, a trickle — is dropped and
// the range comes whole and right from the origin.
func TestHostilePeerAnswersDropped(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100) // 1000 bytes
	for name, h := range map[string]http.HandlerFunc{
		"gzip": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			answer(w, 100, 199, data[100:200])
		},
		"longer (chunked)": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(peer.HeaderSize, "1000")
			w.Header().Set("Content-Range", "bytes 100-199/1000")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[100:150])
			w.(http.Flusher).Flush()
			w.Write(data[150:300])
		},
		"longer (Content-Length)": func(w http.ResponseWriter, r *http.Request) {
			answer(w, 100, 199, data[100:300])
		},
		"shorter": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(peer.HeaderSize, "1000")
			w.Header().Set("Content-Range", "bytes 100-199/1000")
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[100:150]) // and hangs up
		},
		"trickle": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(peer.HeaderSize, "1000")
			w.Header().Set("Content-Range", "bytes 100-199/1000")
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusPartialContent)
			for i := 100; i < 200; i++ {
				w.Write(data[i : i+1])
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(300 * time.Millisecond):
				}
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(h)
			defer srv.Close()
			store := objstore.NewMemory()
			if err := objstore.PutBytes(context.Background(), store, "b", "m/w.bin", data, objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			origin, err := s3src.New(store, "s3://b/m/")
			if err != nil {
				t.Fatal(err)
			}
			var dropped []string
			src := peersrc.New(peersrc.Options{Origin: origin, Model: "org/m", Revision: "main", Peers: []string{srv.URL},
				Token: func() (string, error) { return "t", nil }, Stall: time.Second,
				OnDrop: func(p, reason string) { dropped = append(dropped, reason) }})
			if _, err := src.List(context.Background()); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			start := time.Now()
			n, err := src.GetRange(context.Background(), fsroot.MustPath("w.bin"), 100, 100, &got)
			if err != nil || n != 100 {
				t.Fatalf("GetRange: %d, %v", n, err)
			}
			if !bytes.Equal(got.Bytes(), data[100:200]) {
				t.Errorf("range is not the origin's bytes: %q", got.Bytes())
			}
			if len(dropped) != 1 {
				t.Errorf("peer drops %v, want the peer dropped once", dropped)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s", took)
			}
		})
	}
}

func answer(w http.ResponseWriter, a, b int, body []byte) {
	w.Header().Set(peer.HeaderSize, "1000")
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/1000", a, b))
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusPartialContent)
	w.Write(body)
}
