package peer_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/faultproxy"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/seed"
	"warmd.io/warmd/pkg/peer/serve"
	"warmd.io/warmd/pkg/prefetch"
	peersrc "warmd.io/warmd/pkg/prefetch/weights/source/peer"
)

// TestPeers runs the peer scenarios on one API server and one origin.
func TestPeers(t *testing.T) {
	w := newWorld(t)
	t.Run("fetch from two warm peers", func(t *testing.T) { peerAssisted(t, w.scenario("assisted")) })
	t.Run("a peer serving flipped bits is dropped", func(t *testing.T) { flippedBits(t, w.scenario("flipped")) })
	t.Run("a peer killed mid-chunk costs only its chunks", func(t *testing.T) { killedMidChunk(t, w.scenario("killed")) })
	t.Run("only warmd's token for the peer audience reads", func(t *testing.T) { refusals(t, w.scenario("auth")) })
	t.Run("the upload cap holds", func(t *testing.T) { uploadCap(t, w.scenario("capped")) })
	t.Run("a node group waits for its seed", func(t *testing.T) { waitsForSeed(t, w.scenario("seed")) })
	t.Run("a dead seed is replaced when its Lease expires", func(t *testing.T) { deadSeed(t, w.scenario("deadseed")) })
	t.Run("a failed seed gives its Lease up", func(t *testing.T) { failedSeedReleases(t, w.scenario("failedseed")) })
	t.Run("a busy peer sends a second downloader elsewhere", func(t *testing.T) { busyPeer(t, w.scenario("busy")) })
	t.Run("a peer warm during a fetch is used by it", func(t *testing.T) { warmDuringFetch(t, w.scenario("refresh")) })
	t.Run("only the seed reads the origin while peers are busy", func(t *testing.T) { busyWaits(t, w.scenario("gate")) })
	t.Run("a node still downloading serves the files it verified", func(t *testing.T) { partialPeer(t, w.scenario("partial")) })
	t.Run("a node serves its verified parts", func(t *testing.T) {
		partialParts(t, w.multipart(t, "pp", 3*partSize+1<<20+7), false)
	})
	t.Run("a wrong part is fetched again", func(t *testing.T) {
		partialParts(t, w.multipart(t, "bp", 3*partSize+1<<20+7), true)
	})
}

func from(t *testing.T, st prefetch.ModelStatus) prefetch.ByteSources {
	t.Helper()
	if st.From == nil {
		t.Fatal("status does not say where the bytes came from")
	}
	return *st.From
}

// A cold node reads every byte from its two warm peers, none from the origin, and publishes the model
// verified against the origin's identity; both peers share the work.
func peerAssisted(t *testing.T, w *world) {
	a := w.warmNode(t, 1, nil)
	b := w.warmNode(t, 2, nil)
	servedBefore := testutil.ToFloat64(a.metrics.Peers.ServedBytes) + testutil.ToFloat64(b.metrics.Peers.ServedBytes)
	c := w.node(t, 3, nil)
	st := c.fetch(t, w)
	bs := from(t, st)
	t.Logf("cold node: %d bytes from peers %v, %d from the origin", bs.PeerBytes, bs.Peers, bs.OriginBytes)
	if bs.PeerBytes != w.size() || bs.OriginBytes != 0 {
		t.Errorf("peer bytes %d, origin bytes %d; want all %d from peers", bs.PeerBytes, bs.OriginBytes, w.size())
	}
	if len(bs.Peers) != 2 || len(bs.Dropped) != 0 {
		t.Errorf("peers used %v, dropped %v; want both, none dropped", bs.Peers, bs.Dropped)
	}
	served := testutil.ToFloat64(a.metrics.Peers.ServedBytes) + testutil.ToFloat64(b.metrics.Peers.ServedBytes) - servedBefore
	if int64(served) != w.size() {
		t.Errorf("peers served %v bytes, want %d", served, w.size())
	}
	if got := testutil.ToFloat64(c.metrics.Peers.FetchedBytes.WithLabelValues(w.model.Name, "peer")); int64(got) != w.size() {
		t.Errorf("fetched-from-peer metric %v, want %d", got, w.size())
	}
	// The first warm node read the origin alone (no peer was warm yet), and says so; the second
	// read the first.
	if st, _ := prefetch.WeightsSection.Get(b.store); from(t, st.Models[0]).PeerBytes != w.size() {
		t.Errorf("second node's status %+v; want every byte from the first", st.Models[0].From)
	}
	if st, _ := prefetch.WeightsSection.Get(a.store); from(t, st.Models[0]).OriginBytes != w.size() {
		t.Errorf("first node's status %+v; want every byte from the origin", st.Models[0].From)
	}
}

// One peer (behind a proxy that flips a byte of one response) gives a bad chunk: the file fails
// verification against the origin's checksum, is fetched again from the origin, the bad peer is dropped
// as corrupt, and the published model is correct.
func flippedBits(t *testing.T, w *world) {
	good := w.warmNode(t, 1, nil)
	evil := w.node(t, 2, nil) // a Node claiming the model warm, whose address is the flipping proxy
	evil.warm(t, w)
	proxy, err := faultproxy.StartOn(net.JoinHostPort(evil.ip, w.port), "http://"+net.JoinHostPort(good.ip, w.port))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.Inject(faultproxy.Faults{Corrupt: 1})
	c := w.node(t, 3, nil)
	st := c.fetch(t, w) // checks every published byte against the origin's
	bs := from(t, st)
	t.Logf("flipped: %d bytes from peers %v, %d from the origin, dropped %v", bs.PeerBytes, bs.Peers, bs.OriginBytes, bs.Dropped)
	if proxy.Injected() != 1 {
		t.Fatalf("%d corruptions injected, want 1", proxy.Injected())
	}
	if !slices.Contains(bs.Dropped, evil.ip+":"+w.port+": corrupt") {
		t.Errorf("dropped %v; want the flipping peer as corrupt", bs.Dropped)
	}
	if got := testutil.ToFloat64(c.metrics.Peers.Dropped.WithLabelValues("corrupt")); got != 1 {
		t.Errorf("corrupt drops counted %v, want 1", got)
	}
	if bs.OriginBytes == 0 || bs.OriginBytes >= w.size() {
		t.Errorf("origin bytes %d; want the refetched file only", bs.OriginBytes)
	}
}

// A peer whose server dies while it sends a chunk: the chunk continues from the origin where the peer
// stopped, the peer is dropped, the other peer takes the rest; the origin gives at most the unsent part
// of the chunks that peer had in flight.
func killedMidChunk(t *testing.T, w *world) {
	good := w.warmNode(t, 1, nil)
	victim := w.node(t, 2, nil)
	victim.fetch(t, w)
	victim.warm(t, w)
	h := serve.New(serve.Options{Auth: authFor(t, w), Root: rootOf(t, victim), UploadLimit: 1 << 20, Metrics: victim.metrics.Peers,
		Published: func(string, string) bool { return true }})
	ln, err := net.Listen("tcp", net.JoinHostPort(victim.ip, w.port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	var once sync.Once
	stop := make(chan struct{})
	// Kill it once it has sent half a chunk: the first chunks go to both peers in turn, so the victim
	// is then surely mid-chunk. (At 1.5 chunks it could finish its share first: the uncapped good peer
	// takes every later chunk, and the fetch ended with no kill, about one run in eight.)
	go func() {
		for testutil.ToFloat64(victim.metrics.Peers.ServedBytes) < 0.5*chunk {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		once.Do(func() { srv.Close() })
	}()
	defer func() { close(stop); once.Do(func() { srv.Close() }) }()
	c := w.node(t, 3, nil)
	st := c.fetch(t, w)
	bs := from(t, st)
	t.Logf("killed: %d bytes from peers %v, %d from the origin, dropped %v (good peer served %v)", bs.PeerBytes, bs.Peers,
		bs.OriginBytes, bs.Dropped, testutil.ToFloat64(good.metrics.Peers.ServedBytes))
	if !slices.Contains(bs.Dropped, victim.ip+":"+w.port+": error") {
		t.Errorf("dropped %v; want the killed peer", bs.Dropped)
	}
	// Concurrency 4 over two peers: the victim had at most 2-3 chunks in flight when it died.
	if bs.OriginBytes == 0 || bs.OriginBytes > 3*chunk {
		t.Errorf("origin bytes %d; want only the unsent rest of the killed peer's chunks (0 < x <= %d)", bs.OriginBytes, 3*chunk)
	}
	if bs.PeerBytes+bs.OriginBytes != w.size() {
		t.Errorf("peer %d + origin %d != model %d", bs.PeerBytes, bs.OriginBytes, w.size())
	}
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Range", "bytes=0-99")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Requests without warmd's own token for the peer audience are refused: none (401), a token for the
// API server's audience (401), another ServiceAccount's token for the peer audience (403); names that
// are not a published file are 400 or 404, and each refusal is counted by reason.
func refusals(t *testing.T, w *world) {
	a := w.warmNode(t, 1, nil)
	base := "http://" + net.JoinHostPort(a.ip, w.port)
	good := w.kube.Token(t, "warmd", "warmd", audience)
	url := peer.WeightsURL(base, w.model.Name, w.model.Revision, "shard-1.bin")
	for _, tc := range []struct {
		name, url, token string
		want             int
	}{
		{"no token", url, "", http.StatusUnauthorized},
		{"garbage token", url, "xyz", http.StatusUnauthorized},
		{"token for another audience", url, w.kube.Token(t, "warmd", "warmd", "https://kubernetes.default.svc"), http.StatusUnauthorized},
		{"another service account", url, w.kube.Token(t, "default", "intruder", audience), http.StatusForbidden},
		{"warmd's token", url, good, http.StatusPartialContent},
		{"path out of the snapshot", peer.WeightsURL(base, w.model.Name, w.model.Revision, "../../blobs/x"), good, http.StatusBadRequest},
		{"staging is never served", peer.WeightsURL(base, w.model.Name, w.model.Revision, ".staging"), good, http.StatusNotFound},
		{"revision not published", peer.WeightsURL(base, w.model.Name, "r2", "shard-1.bin"), good, http.StatusNotFound},
		{"bad model name", peer.WeightsURL(base, "../etc", w.model.Revision, "shard-1.bin"), good, http.StatusBadRequest},
	} {
		if code, body := get(t, tc.url, tc.token); code != tc.want {
			t.Errorf("%s: %d %q, want %d", tc.name, code, strings.TrimSpace(body), tc.want)
		}
	}
	for reason, want := range map[string]float64{"unauthenticated": 3, "forbidden": 1, "bad_request": 2, "not_found": 2} {
		if got := testutil.ToFloat64(a.metrics.Peers.Refused.WithLabelValues(reason)); got != want {
			t.Errorf("refused %s: %v, want %v", reason, got, want)
		}
	}
}

// Three readers at once get no more than the node's upload cap together.
func uploadCap(t *testing.T, w *world) {
	a := w.warmNode(t, 1, uploadLimit("4Mi"))
	base := "http://" + net.JoinHostPort(a.ip, w.port)
	token := w.kube.Token(t, "warmd", "warmd", audience)
	const readers, each = 3, 3 * chunk
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	t0 := time.Now()
	for i := range readers {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet,
				peer.WeightsURL(base, w.model.Name, w.model.Revision, "shard-1.bin"), nil)
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Range", rangeOf(int64(i)*each, each))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			n, _ := io.Copy(io.Discard, resp.Body)
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(t0)
	rate := float64(total) / el.Seconds()
	t.Logf("upload cap 4 MiB/s: %d bytes to %d readers in %s = %.2f MiB/s", total, readers, el.Round(time.Millisecond), rate/(1<<20))
	if total != readers*each {
		t.Fatalf("read %d bytes, want %d", total, readers*each)
	}
	if rate > 1.1*4*(1<<20) {
		t.Errorf("served %.2f MiB/s, over the 4 MiB/s cap", rate/(1<<20))
	}
}

// Two nodes want the model and neither holds it: the first to ask takes the model's seed Lease and
// reads the origin; the second, asking while the Lease is held, waits instead of reading the origin,
// then reads every byte from the seed once it is warm. The seed keeps its Lease after it published
// (until it expires unrenewed), so a node still waiting cannot take it before readiness labels the
// seed warm. A node that already holds the model never waits.
func waitsForSeed(t *testing.T, w *world) {
	w.originDelay = 300 * time.Millisecond // the seed's fetch lasts seconds
	first := w.node(t, 2, nil)             // sorts after the other by name: the first to ask wins, not the first by name
	first.label(t, w, "cold")
	late := w.node(t, 1, func(c *config.NodeConfig) { c.Peers.SeedWait = metav1.Duration{Duration: time.Minute} })
	late.label(t, w, "cold")
	seedDone := make(chan prefetch.ModelStatus, 1)
	seedErr := make(chan error, 1)
	go func() {
		st, err := first.engine.Fetch(context.Background(), w.model, nil)
		seedErr <- err
		seedDone <- st
	}()
	if holder := w.awaitSeed(t, ""); holder != first.name {
		t.Fatalf("seed Lease held by %q; want %s, the first to ask", holder, first.name)
	}
	done := make(chan prefetch.ModelStatus, 1)
	go func() {
		st, err := late.engine.Fetch(context.Background(), w.model, nil)
		if err != nil {
			t.Error(err)
		}
		done <- st
	}()
	if err := <-seedErr; err != nil {
		t.Fatalf("the seed's fetch: %v", err)
	}
	st := <-seedDone
	verified(t, w, first.name, st)
	prefetch.WeightsSection.Publish(first.store, prefetch.WeightsStatus{Models: []prefetch.ModelStatus{st}})
	if bs := from(t, st); bs.OriginBytes != w.size() {
		t.Errorf("the seed read %d bytes from the origin; want all %d", bs.OriginBytes, w.size())
	}
	time.Sleep(3 * time.Second) // the late node polls every 2s: it must still be waiting, not reading the origin
	select {
	case st := <-done:
		t.Fatalf("the late node did not wait for its seed: %+v", st.From)
	default:
	}
	if holder := w.seedHolder(t); holder != first.name {
		t.Errorf("after publishing, the seed Lease is held by %q; want %s until it expires", holder, first.name)
	}
	first.serve(t, w)
	first.warm(t, w)
	st = <-done
	bs := from(t, st)
	t.Logf("late node: %d bytes from peers %v, %d from the origin", bs.PeerBytes, bs.Peers, bs.OriginBytes)
	if bs.PeerBytes != w.size() || bs.OriginBytes != 0 {
		t.Errorf("late node read %d from peers and %d from the origin; want all %d from the seed", bs.PeerBytes, bs.OriginBytes, w.size())
	}
	// The seed, warm now, is not fetched again and does not wait.
	w.node(t, 0, nil).label(t, w, "cold")
	t0 := time.Now()
	if _, err := first.engine.Fetch(context.Background(), w.model, nil); err != nil || time.Since(t0) > time.Second {
		t.Errorf("a published model's fetch took %s (%v); want no wait", time.Since(t0), err)
	}
}

// A seed that dies (its process is gone: it neither renews nor releases its Lease) is replaced: a
// waiting node takes the Lease over once it has not changed for its duration, by the waiting node's
// own clock, and reads the model from the origin; published, it gives the Lease up a duration later.
func deadSeed(t *testing.T, w *world) {
	old := peersrc.SetSeedLease(2 * time.Second)
	t.Cleanup(func() { peersrc.SetSeedLease(old) })
	dead := seed.New(w.kube.Client, "warmd", w.model.Name, w.model.Revision, w.prefix+"-dead", 2*time.Second)
	if held, _, err := dead.Acquire(context.Background()); err != nil || !held {
		t.Fatalf("the dead seed's Lease: held %v, %v", held, err)
	}
	n := w.node(t, 1, nil)
	n.label(t, w, "cold")
	t0 := time.Now()
	st := n.fetch(t, w)
	took := time.Since(t0)
	bs := from(t, st)
	t.Logf("%s took the Lease over and fetched in %s: %d from the origin", n.name, took.Round(time.Millisecond), bs.OriginBytes)
	if took < 2*time.Second {
		t.Errorf("fetched in %s: it did not wait the dead seed's 2s Lease out", took)
	}
	if took > 15*time.Second {
		t.Errorf("fetched in %s: the dead seed was not replaced when its Lease expired", took)
	}
	if bs.OriginBytes != w.size() {
		t.Errorf("read %d bytes from the origin; want all %d", bs.OriginBytes, w.size())
	}
	if holder := w.seedHolder(t); holder != n.name {
		t.Errorf("seed Lease held by %q; want %s, which took it over", holder, n.name)
	}
	// Published, it gives the Lease up a Lease duration later: a wave that comes after every warm
	// node left takes it at once instead of waiting out a holder that is gone.
	for deadline := time.Now().Add(10 * time.Second); w.seedHolder(t) != ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("seed Lease still held by %q 10s after %s published; want it given up after 2s", w.seedHolder(t), n.name)
		}
	}
}

// A seed whose fetch fails gives its Lease up at once, so a waiting node does not wait it out.
func failedSeedReleases(t *testing.T, w *world) {
	w.originDelay = 300 * time.Millisecond
	n := w.node(t, 1, nil)
	n.label(t, w, "cold")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := n.engine.Fetch(ctx, w.model, nil)
		errc <- err
	}()
	if holder := w.awaitSeed(t, ""); holder != n.name {
		t.Fatalf("seed Lease held by %q; want %s", holder, n.name)
	}
	cancel() // the fetch stops: as when warmd is told to stop, or the model is dropped from the config
	if err := <-errc; err == nil {
		t.Fatal("a stopped fetch returned no error")
	}
	if holder := w.seedHolder(t); holder != "" {
		t.Errorf("after a failed fetch the seed Lease is held by %q; want it given up", holder)
	}
}

// seedHolder is the holder of the scenario's seed Lease ("" when it has none).
func (w *world) seedHolder(t *testing.T) string {
	t.Helper()
	l, err := w.kube.Client.CoordinationV1().Leases("warmd").Get(context.Background(), seed.Name(w.model.Name, w.model.Revision), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// awaitSeed waits until the scenario's seed Lease is held by someone other than not, and names it.
func (w *world) awaitSeed(t *testing.T, not string) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if h := w.seedHolder(t); h != "" && h != not {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatal("nobody took the seed Lease in 30s")
		}
	}
}

// expireSeed removes the scenario's seed Lease, as if its holder had published long ago and the Lease
// had expired: the next node that needs the origin takes it at once.
func (w *world) expireSeed(t *testing.T) {
	t.Helper()
	err := w.kube.Client.CoordinationV1().Leases("warmd").Delete(context.Background(), seed.Name(w.model.Name, w.model.Revision), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
