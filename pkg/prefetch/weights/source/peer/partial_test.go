package peer_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
)

// heldSource holds every GetRange of one file that reaches past from until open is closed.
type heldSource struct {
	prefetch.Source
	file string
	from int64
	open <-chan struct{}
}

func (h heldSource) GetRange(ctx context.Context, name fsroot.Path, off, n int64, w io.Writer) (int64, error) {
	if name.String() == h.file && off+n > h.from {
		select {
		case <-h.open:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return h.Source.GetRange(ctx, name, off, n, w)
}

func held(open weights.OpenSource, file string, from int64, ch <-chan struct{}) weights.OpenSource {
	return func(ctx context.Context, m config.Model) (prefetch.Source, error) {
		src, err := open(ctx, m)
		if err != nil {
			return nil, err
		}
		return heldSource{Source: src, file: file, from: from, open: ch}, nil
	}
}

// The seed's download stops short of its last file; a node of the same wave does not wait for the
// whole revision: it reads every file the seed verified from the seed's staging while the seed is
// still downloading (the seed is labeled cold, its revision not published), waits for the held file
// rather than reading it from the origin beside the seed (the seed rule), and takes it from the seed
// once the seed publishes. Not one byte of the second node's comes from the origin.
func partialPeer(t *testing.T, w *world) {
	const last = "shard-3.bin" // the engine fetches in name order: the held file is the last
	w.hold, w.holdOpen = last, make(chan struct{})
	seedNode := w.node(t, 1, nil)
	seedNode.label(t, w, "cold")
	seedNode.serve(t, w)
	w.hold = ""
	late := w.node(t, 2, nil)
	late.label(t, w, "cold")

	// Both fetches end before the test does, whatever it found.
	ctx, cancel := context.WithCancel(context.Background())
	var release sync.Once
	open := func() { release.Do(func() { close(w.holdOpen) }) }
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); open(); wg.Wait() })
	seedDone := make(chan error, 1)
	wg.Go(func() {
		st, err := seedNode.engine.Fetch(ctx, w.model, func(st prefetch.ModelStatus) {
			prefetch.WeightsSection.Publish(seedNode.store, prefetch.WeightsStatus{Models: []prefetch.ModelStatus{st}})
		})
		if err == nil {
			prefetch.WeightsSection.Publish(seedNode.store, prefetch.WeightsStatus{Models: []prefetch.ModelStatus{st}})
		}
		seedDone <- err
	})
	if holder := w.awaitSeed(t, ""); holder != seedNode.name {
		t.Fatalf("seed Lease held by %q; want %s", holder, seedNode.name)
	}
	stagedAll := func() bool {
		staged := prefetch.StagedIn(seedNode.store)(w.model.Name, w.model.Revision)
		return len(staged) == len(w.files)-1 && staged[last] == ""
	}
	for deadline := time.Now().Add(20 * time.Second); !stagedAll(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the seed did not verify its other files while %s was held: staged %v", last,
				prefetch.StagedIn(seedNode.store)(w.model.Name, w.model.Revision))
		}
	}

	type result struct {
		st  prefetch.ModelStatus
		err error
	}
	lateDone := make(chan result, 1)
	wg.Go(func() {
		st, err := late.engine.Fetch(ctx, w.model, nil)
		lateDone <- result{st, err}
	})
	// Everything but the held file comes from the seed while its revision is still in flight.
	rest := w.size() - int64(len(w.files[last]))
	fromPeers := func() int64 {
		return int64(testutil.ToFloat64(late.metrics.Peers.FetchedBytes.WithLabelValues(w.model.Name, peer.FromPeer)))
	}
	for deadline := time.Now().Add(15 * time.Second); fromPeers() < rest; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the late node read %d bytes from the seed while it downloaded; want the %d of its verified files", fromPeers(), rest)
		}
	}
	time.Sleep(2 * time.Second) // past busyGrace: the held file's chunks still wait for the seed
	if got := testutil.ToFloat64(late.metrics.Peers.FetchedBytes.WithLabelValues(w.model.Name, peer.FromOrigin)); got != 0 {
		t.Fatalf("the late node read %v bytes from the origin beside its seed", got)
	}
	select {
	case r := <-lateDone:
		t.Fatalf("the late node finished before the seed had its last file: %+v, %v", r.st.From, r.err)
	default:
	}
	if got := fromPeers(); got != rest {
		t.Errorf("the late node read %d bytes from the seed before it verified %s; want %d", got, last, rest)
	}

	open()
	if err := <-seedDone; err != nil {
		t.Fatalf("the seed's fetch: %v", err)
	}
	var st prefetch.ModelStatus
	select {
	case r := <-lateDone:
		if r.err != nil {
			t.Fatalf("the late node's fetch: %v", r.err)
		}
		st = r.st
	case <-time.After(30 * time.Second):
		t.Fatal("the late node did not finish after the seed published")
	}
	verified(t, w, late.name, st)
	bs := from(t, st)
	t.Logf("late node: %d bytes from peers %v, %d from the origin", bs.PeerBytes, bs.Peers, bs.OriginBytes)
	if bs.PeerBytes != w.size() || bs.OriginBytes != 0 || len(bs.Dropped) != 0 {
		t.Errorf("late node: %d bytes from peers, %d from the origin, dropped %v; want all %d from the seed, none dropped",
			bs.PeerBytes, bs.OriginBytes, bs.Dropped, w.size())
	}
}
