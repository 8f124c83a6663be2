package cache

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/peer"
)

// TestPeerFallback: peers that answer late, fail or do not keep a bundle cost a request each; the
// bundles come from the origin, a failing peer is dropped once (for the rest of the pass), a peer that
// only lacks the bundle (404) is not, and the pass does not wait for a silent peer past StartTimeout.
func TestPeerFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, bucket := objstore.NewMemory(), "cache-mem"
	a := newManager(t, skuA, s, bucket)
	shareSmall(t, a)
	// A peer that accepts connections and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", 500) }))
	defer failing.Close()
	lacking := httptest.NewServer(http.NotFoundHandler())
	defer lacking.Close()
	var drops []string
	var asked int
	po := &PeerOptions{StartTimeout: 300 * time.Millisecond, Token: func() (string, error) { return "t", nil },
		Discover: func(context.Context, string) ([]string, error) {
			asked++
			return []string{lacking.URL, "http://" + silent.Addr().String(), failing.URL}, nil
		},
		OnDrop: func(_, reason string) { drops = append(drops, reason) }}
	b := newManager(t, skuA, s, bucket, func(o *Options) { o.Peers = po; o.Concurrency = 1 })
	start := time.Now()
	res, err := b.Restore(ctx)
	took := time.Since(start)
	if err != nil || len(res.Refused) != 0 || len(res.Restored) < 2 {
		t.Fatalf("restore: %d restored, refused %v (%v)", len(res.Restored), res.Refused, err)
	}
	st := b.Stats()
	if st.PeerBytes != 0 || st.OriginBytes == 0 || st.PeersDropped != 2 || len(drops) != 2 || drops[0] != peer.DropError || drops[1] != peer.DropError {
		t.Errorf("peer %d bytes, origin %d, dropped %d %v; want all from the origin and the silent and failing peers dropped once", st.PeerBytes, st.OriginBytes, st.PeersDropped, drops)
	}
	if asked != 1 {
		t.Errorf("peers discovered %d times in one pass", asked)
	}
	if took > 5*time.Second {
		t.Errorf("restore took %v: a silent peer held it past StartTimeout", took)
	}
	if n, _ := b.KeptBundles(); n != len(res.Restored) {
		t.Errorf("kept %d of %d bundles restored from the origin", n, len(res.Restored))
	}
}
