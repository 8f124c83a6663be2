package peer_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/prefetch"
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
			origin := originOf(t, data)
			var dropped []string
			src := peersrc.New(peersrc.Options{Origin: origin, Model: "org/m", Revision: "main", Peers: []string{srv.URL},
				Token: func() (string, error) { return "t", nil }, Stall: time.Second,
				OnDrop: func(p, reason string) { dropped = append(dropped, reason) }})
			start := time.Now()
			getRange(t, src, data)
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

// A node still downloading says which files it serves (peer.WeightFilesPath); an answer that is not
// a bounded, plain list of files the origin lists makes it no peer of the fetch, and the range comes
// whole from the origin. One that names a file and then answers 404 for it loses that name, not its
// place. The last case is the control: a good answer, and the range comes from the peer.
func TestHostileServedFilesAnswers(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100) // 1000 bytes
	names := func(n int) string {
		var b bytes.Buffer
		b.WriteString(`{"files":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%q", fmt.Sprintf("f%d", i))
		}
		b.WriteString(`,"w.bin"]}`)
		return b.String()
	}
	files := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) }
	}
	for _, c := range []struct {
		name     string
		files    http.HandlerFunc
		fromPeer bool
	}{
		{name: "names the origin does not list", files: files(`{"files":["../w.bin","/w.bin","w.bin/..","W.BIN"]}`)},
		{name: "not JSON", files: files(`w.bin`)},
		{name: "over the body bound", files: files(`{"files":["w.bin"` + strings.Repeat(` `, peer.MaxWeightFilesBytes) + `]}`)},
		{name: "too many names", files: files(names(peer.MaxWeightFiles))},
		{name: "encoded", files: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write([]byte(`{"files":["w.bin"]}`))
		}},
		{name: "stalls", files: func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"files":[`))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
		{name: "names a file it then does not hold", files: files(`{"files":["w.bin"]}`)},
		{name: "a good answer (control)", files: files(`{"files":["w.bin"]}`), fromPeer: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ranges atomic.Int32
			mux := http.NewServeMux()
			mux.HandleFunc(peer.WeightFilesPath, c.files)
			mux.HandleFunc(peer.WeightsPath, func(w http.ResponseWriter, r *http.Request) {
				ranges.Add(1)
				if !c.fromPeer {
					http.NotFound(w, r)
					return
				}
				answer(w, 100, 199, data[100:200])
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			origin := originOf(t, data)
			var dropped []string
			src := peersrc.New(peersrc.Options{Origin: origin, Model: "org/m", Revision: "main",
				Partial:      func(context.Context) ([]string, error) { return []string{srv.URL}, nil },
				RefreshEvery: time.Nanosecond, Token: func() (string, error) { return "t", nil }, Stall: time.Second,
				OnDrop: func(p, reason string) { dropped = append(dropped, reason) }})
			start := time.Now()
			getRange(t, src, data)
			bs := src.ByteSources()
			wantPeer, wantRanges := int64(0), int32(0)
			switch {
			case c.fromPeer:
				wantPeer, wantRanges = 100, 1
			case c.name == "names a file it then does not hold":
				wantRanges = 1
			}
			if bs.PeerBytes != wantPeer || bs.OriginBytes != 100-wantPeer {
				t.Errorf("%d bytes from the peer, %d from the origin; want %d from the peer", bs.PeerBytes, bs.OriginBytes, wantPeer)
			}
			if got := ranges.Load(); got != wantRanges {
				t.Errorf("the peer was asked for %d ranges; want %d", got, wantRanges)
			}
			if len(dropped) != 0 {
				t.Errorf("dropped %v: a node that is no peer of the fetch is not dropped from it", dropped)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s", took)
			}
		})
	}
}

// originOf is an origin holding data as w.bin.
func originOf(t *testing.T, data []byte) prefetch.Source {
	t.Helper()
	store := objstore.NewMemory()
	if err := objstore.PutBytes(context.Background(), store, "b", "m/w.bin", data, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	origin, err := s3src.New(store, "s3://b/m/")
	if err != nil {
		t.Fatal(err)
	}
	return origin
}

// getRange lists src and reads bytes 100-199 of w.bin through it, which must be data's.
func getRange(t *testing.T, src *peersrc.Source, data []byte) {
	t.Helper()
	if _, err := src.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	n, err := src.GetRange(context.Background(), fsroot.MustPath("w.bin"), 100, 100, &got)
	if err != nil || n != 100 {
		t.Fatalf("GetRange: %d, %v", n, err)
	}
	if !bytes.Equal(got.Bytes(), data[100:200]) {
		t.Errorf("range is not the origin's bytes: %q", got.Bytes())
	}
}
