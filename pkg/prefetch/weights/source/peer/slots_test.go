package peer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/seed"
	"warmd.io/warmd/pkg/peer/serve"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
	peersrc "warmd.io/warmd/pkg/prefetch/weights/source/peer"
)

// slowSource holds every GetRange of the origin for a while.
type slowSource struct {
	prefetch.Source
	delay time.Duration
}

func (s slowSource) GetRange(ctx context.Context, name fsroot.Path, off, n int64, w io.Writer) (int64, error) {
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(s.delay):
	}
	return s.Source.GetRange(ctx, name, off, n, w)
}

func delayed(open weights.OpenSource, d time.Duration) weights.OpenSource {
	return func(ctx context.Context, m config.Model) (prefetch.Source, error) {
		src, err := open(ctx, m)
		if err != nil {
			return nil, err
		}
		return slowSource{Source: src, delay: d}, nil
	}
}

// verified checks that st's published files are the origin's, byte for byte (from any goroutine's
// fetch, checked on the test's).
func verified(t *testing.T, w *world, who string, st prefetch.ModelStatus) {
	t.Helper()
	for name, want := range w.files {
		got, err := os.ReadFile(filepath.Join(st.SnapshotPath, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: published %s differs from the origin's (%v)", who, name, err)
		}
	}
}

// With one serving slot and two nodes fetching at once from the one warm peer, the peer serves one of
// them; the other is told busy for its chunks and, since nobody holds the model's seed Lease (the warm
// peer's expired long ago), takes it and reads those chunks from the origin, without dropping the
// peer. Only that node reads the origin, and both publish the model verified.
func busyPeer(t *testing.T, w *world) {
	// 4 MiB/s: the slot holder's fetch lasts seconds, so the other's chunks arrive while it is held.
	a := w.warmNode(t, 1, func(c *config.NodeConfig) { c.Peers.ServeSlots = 1; uploadLimit("4Mi")(c) })
	w.expireSeed(t)
	servedBefore := testutil.ToFloat64(a.metrics.Peers.ServedBytes)
	c, d := w.node(t, 2, nil), w.node(t, 3, nil)
	var wg sync.WaitGroup
	sts := make([]prefetch.ModelStatus, 2)
	errs := make([]error, 2)
	for i, n := range []*node{c, d} {
		wg.Go(func() { sts[i], errs[i] = n.engine.Fetch(context.Background(), w.model, nil) })
	}
	wg.Wait()
	busy := testutil.ToFloat64(a.metrics.Peers.Refused.WithLabelValues(serve.ReasonBusy))
	var peerBytes, originBytes int64
	readers := 0
	for i, n := range []*node{c, d} {
		if errs[i] != nil {
			t.Fatalf("%s: fetch: %v", n.name, errs[i])
		}
		verified(t, w, n.name, sts[i])
		bs := from(t, sts[i])
		t.Logf("%s: %d bytes from peers %v, %d from the origin, dropped %v", n.name, bs.PeerBytes, bs.Peers, bs.OriginBytes, bs.Dropped)
		if bs.PeerBytes+bs.OriginBytes != w.size() {
			t.Errorf("%s: peer %d + origin %d != model %d", n.name, bs.PeerBytes, bs.OriginBytes, w.size())
		}
		if len(bs.Dropped) != 0 {
			t.Errorf("%s dropped %v; a busy peer is not a failed one", n.name, bs.Dropped)
		}
		for _, reason := range []string{peer.DropError, peer.DropCorrupt} {
			if got := testutil.ToFloat64(n.metrics.Peers.Dropped.WithLabelValues(reason)); got != 0 {
				t.Errorf("%s counted %v peers dropped as %s", n.name, got, reason)
			}
		}
		peerBytes += bs.PeerBytes
		originBytes += bs.OriginBytes
		if bs.OriginBytes > 0 {
			readers++
		}
	}
	if readers > 1 {
		t.Errorf("%d nodes read the origin while the peer was busy; want only the seed Lease's holder", readers)
	}
	t.Logf("the peer refused %v requests as busy", busy)
	if busy == 0 {
		t.Error("the peer never answered busy: with one slot it served both downloaders at once")
	}
	if peerBytes == 0 || originBytes == 0 {
		t.Errorf("peer bytes %d, origin bytes %d; want the slot holder served by the peer and the other by the origin", peerBytes, originBytes)
	}
	if served := testutil.ToFloat64(a.metrics.Peers.ServedBytes) - servedBefore; int64(served) != peerBytes {
		t.Errorf("peer served %v bytes, the downloaders got %d from peers", served, peerBytes)
	}
}

// A node that becomes warm while another fetches (here from a slow origin, as the seed) is found by
// that fetch's next look at the peers, and serves it the rest.
func warmDuringFetch(t *testing.T, w *world) {
	old := peersrc.SetRefreshEvery(300 * time.Millisecond)
	t.Cleanup(func() { peersrc.SetRefreshEvery(old) })
	b := w.node(t, 1, nil) // holds the model and serves it, but its Node does not say so yet
	b.label(t, w, "cold")
	b.fetch(t, w)
	b.serve(t, w)
	unlabel(t, w, b) // not warm: c finds no peer, takes the seed Lease and reads the origin
	w.expireSeed(t)  // b's, kept after it published, as if it had expired
	w.originDelay = 600 * time.Millisecond
	c := w.node(t, 2, nil)
	c.label(t, w, "cold") // the only node that wants the model: the seed, it reads the origin
	done := make(chan struct{})
	var st prefetch.ModelStatus
	var err error
	go func() {
		defer close(done)
		st, err = c.engine.Fetch(context.Background(), w.model, nil)
	}()
	origin := c.metrics.Peers.FetchedBytes.WithLabelValues(w.model.Name, "origin")
	for deadline := time.Now().Add(30 * time.Second); testutil.ToFloat64(origin) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fetch read nothing from the origin in 30s")
		}
	}
	b.warm(t, w)
	<-done
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	verified(t, w, c.name, st)
	bs := from(t, st)
	t.Logf("%s: %d bytes from peers %v, %d from the origin", c.name, bs.PeerBytes, bs.Peers, bs.OriginBytes)
	if bs.PeerBytes == 0 || len(bs.Peers) != 1 || bs.Peers[0] != b.ip+":"+w.port {
		t.Errorf("peer bytes %d from %v; want some from %s, warm since the fetch started", bs.PeerBytes, bs.Peers, b.ip)
	}
	if bs.OriginBytes == 0 || bs.PeerBytes+bs.OriginBytes != w.size() {
		t.Errorf("origin %d + peer %d; want the start from the origin and all %d in all", bs.OriginBytes, bs.PeerBytes, w.size())
	}
}

// unlabel removes the model's label from n's Node.
func unlabel(t *testing.T, w *world, n *node) {
	t.Helper()
	key := model.LabelKeys([]string{w.model.Name})[w.model.Name]
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, key)
	if _, err := w.kube.Client.CoreV1().Nodes().Patch(context.Background(), n.name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Two nodes of a group (both labelled cold) and one warm peer with one slot: the first holds the slot
// and the group's seed Lease (it asked first); the second, told busy and not the seed, waits for the
// slot instead of reading the origin, and reads every byte from the peer once the first is done.
func busyWaits(t *testing.T, w *world) {
	a := w.warmNode(t, 1, func(c *config.NodeConfig) { c.Peers.ServeSlots = 1; uploadLimit("4Mi")(c) })
	c, d := w.node(t, 2, nil), w.node(t, 3, nil)
	w.expireSeed(t)
	if held, _, err := seed.New(w.kube.Client, "warmd", w.model.Name, w.model.Revision, c.name, 0).Acquire(context.Background()); err != nil || !held {
		t.Fatalf("%s takes the seed Lease: held %v, %v", c.name, held, err)
	}
	c.label(t, w, "cold")
	d.label(t, w, "cold")
	var wg sync.WaitGroup
	var stC prefetch.ModelStatus
	var errC error
	wg.Go(func() { stC, errC = c.engine.Fetch(context.Background(), w.model, nil) })
	peer := c.metrics.Peers.FetchedBytes.WithLabelValues(w.model.Name, "peer")
	for deadline := time.Now().Add(30 * time.Second); testutil.ToFloat64(peer) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first node read nothing from the peer in 30s")
		}
	}
	stD, errD := d.engine.Fetch(context.Background(), w.model, nil)
	wg.Wait()
	if errC != nil || errD != nil {
		t.Fatalf("fetch: %v, %v", errC, errD)
	}
	verified(t, w, c.name, stC)
	verified(t, w, d.name, stD)
	bc, bd := from(t, stC), from(t, stD)
	busy := testutil.ToFloat64(a.metrics.Peers.Refused.WithLabelValues(serve.ReasonBusy))
	t.Logf("%s: %d from peers, %d from the origin; %s: %d from peers, %d from the origin; %v busy answers",
		c.name, bc.PeerBytes, bc.OriginBytes, d.name, bd.PeerBytes, bd.OriginBytes, busy)
	if busy == 0 {
		t.Error("the peer never answered busy")
	}
	if bd.OriginBytes != 0 || bd.PeerBytes != w.size() || len(bd.Dropped) != 0 {
		t.Errorf("%s read %d bytes from the origin, %d from peers, dropped %v; want all from the peer after waiting", d.name,
			bd.OriginBytes, bd.PeerBytes, bd.Dropped)
	}
}
