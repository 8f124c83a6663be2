package peer_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"warmd.io/warmd/internal/faultproxy"
	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/objstore/objstoretest"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
)

const partSize = 5 << 20 // S3's least part size but the last

// multipart is w for one subtest with a model of its own: a config and one file uploaded to the
// origin as a multipart object with CRC32C part checksums (a composite checksum), as `aws s3 cp`
// and s5cmd upload big files with checksums on. The nodes made from it see the part checksums in
// the part list (partSums).
func (w *world) multipart(t *testing.T, name string, size int) *world {
	t.Helper()
	c := w.scenario(name)
	rng := rand.New(rand.NewPCG(3, uint64(size)))
	big := make([]byte, size)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	c.files = map[string][]byte{"config.json": []byte(`{"model_type": "llama"}`), "big.bin": big}
	prefix := "mp-" + name + "/"
	if err := objectPut(w, prefix+"config.json", c.files["config.json"]); err != nil {
		t.Fatal(err)
	}
	objstoretest.PutMultipart(t, w.origin.Client(), w.bucket, prefix+"big.bin", big, partSize, types.ChecksumAlgorithmCrc32c, types.ChecksumTypeComposite)
	c.model.Source = "s3://" + w.bucket + "/" + prefix
	c.partSums = true
	return c
}

// partSummed gives the origin's part list with each part's CRC32C, as AWS S3's GetObjectAttributes
// does (versitygw's leaves them out); the bytes, sizes and everything else are the origin's.
type partSummed struct {
	prefetch.Source
	files map[string][]byte
}

func (p partSummed) Parts(ctx context.Context, name fsroot.Path) ([]objstore.Part, error) {
	parts, err := p.Source.Parts(ctx, name)
	b, ok := p.files[name.String()]
	if err != nil || !ok {
		return parts, err
	}
	out := slices.Clone(parts)
	var off int64
	for i := range out {
		end := min(off+out[i].Size, int64(len(b)))
		sum := crc32.Checksum(b[off:end], crc32.MakeTable(crc32.Castagnoli))
		out[i].Checksum = objstore.Encode(binary.BigEndian.AppendUint32(nil, sum))
		off = end
	}
	return out, nil
}

func withPartSums(open weights.OpenSource, files map[string][]byte) weights.OpenSource {
	return func(ctx context.Context, m config.Model) (prefetch.Source, error) {
		src, err := open(ctx, m)
		if err != nil {
			return nil, err
		}
		return partSummed{Source: src, files: files}, nil
	}
}

func objectPut(w *world, key string, b []byte) error {
	_, err := w.origin.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: &w.bucket, Key: &key, Body: bytes.NewReader(b)})
	return err
}

// A node still downloading a multipart file serves its parts as each matches the origin's part
// checksum: its first two parts land (the rest is held back), and a node of the same wave reads
// those parts from it, not one byte from the origin, before the file is whole anywhere. With evil
// set, a third node (a proxy in front of the seed that flips a byte of one body) is in the wave too:
// the part it corrupted fails its part checksum at the downloader, which fetches that part again
// (from the origin, which shows the proxy's bytes wrong: it is dropped as corrupt), so the origin
// gives at most that part, not the file, and nothing wrong is published.
func partialParts(t *testing.T, w *world, evil bool) {
	const big = "big.bin"
	w.hold, w.holdFrom, w.holdOpen = big, 2*partSize, make(chan struct{})
	seedNode := w.node(t, 1, nil)
	seedNode.label(t, w, "cold")
	seedNode.serve(t, w)
	w.hold = ""
	var proxy *faultproxy.Proxy
	if evil {
		bad := w.node(t, 3, nil)
		bad.label(t, w, "cold")
		var err error
		proxy, err = faultproxy.StartOn(net.JoinHostPort(bad.ip, w.port), "http://"+net.JoinHostPort(seedNode.ip, w.port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		proxy.Inject(faultproxy.Faults{Corrupt: 1, Match: func(r *http.Request) bool { return r.URL.Path == peer.WeightsPath }})
	}
	late := w.node(t, 2, nil)
	late.label(t, w, "cold")

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
	want := [][2]int64{{0, 2 * partSize}}
	partsIn := func() [][2]int64 {
		return prefetch.PiecesIn(seedNode.store)(w.model.Name, w.model.Revision)[big].Spans
	}
	for deadline := time.Now().Add(20 * time.Second); !slices.Equal(partsIn(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the seed did not list parts 1-2 of %s as verified while the rest was held: %v", big, partsIn())
		}
	}
	if staged := prefetch.StagedIn(seedNode.store)(w.model.Name, w.model.Revision); staged[big] != "" {
		t.Fatalf("%s staged whole while its last parts are held", big)
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
	// The seed's workers all wait on the held parts, so its config is not there yet either.
	rest := int64(2 * partSize)
	fromPeers := func() int64 {
		return int64(testutil.ToFloat64(late.metrics.Peers.FetchedBytes.WithLabelValues(w.model.Name, peer.FromPeer)))
	}
	fromOrigin := func() int64 {
		return int64(testutil.ToFloat64(late.metrics.Peers.FetchedBytes.WithLabelValues(w.model.Name, peer.FromOrigin)))
	}
	// With evil, a chunk in flight from the proxy when it is dropped continues from the origin.
	landed := func() bool { return fromPeers() >= rest || (evil && fromPeers()+fromOrigin() >= rest+partSize) }
	for deadline := time.Now().Add(20 * time.Second); !landed(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the late node read %d bytes from peers while the seed downloaded; want the %d of its verified parts", fromPeers(), rest)
		}
	}
	if evil {
		// The part is found wrong and fetched again while the file is still incomplete everywhere.
		corrupt := func() float64 {
			return testutil.ToFloat64(late.metrics.Peers.Dropped.WithLabelValues(peer.DropCorrupt))
		}
		for deadline := time.Now().Add(20 * time.Second); corrupt() == 0 || fromOrigin() == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the part the proxy corrupted was not fetched again while the seed downloaded")
			}
		}
	} else {
		time.Sleep(2 * time.Second) // past busyGrace: the held parts' chunks still wait for the seed
		if got := fromOrigin(); got != 0 {
			t.Fatalf("the late node read %d bytes from the origin beside its seed", got)
		}
	}
	select {
	case r := <-lateDone:
		t.Fatalf("the late node finished before the seed had its last parts: %+v, %v", r.st.From, r.err)
	default:
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
	t.Logf("late node: %d bytes from peers %v, %d from the origin, dropped %v", bs.PeerBytes, bs.Peers, bs.OriginBytes, bs.Dropped)
	for _, fv := range st.Files {
		if fv.Name == big && fv.Method != prefetch.VerifiedComposite {
			t.Errorf("%s verified by %s, want %s", big, fv.Method, prefetch.VerifiedComposite)
		}
	}
	if !evil {
		if bs.PeerBytes != w.size() || bs.OriginBytes != 0 || len(bs.Dropped) != 0 {
			t.Errorf("late node: %d bytes from peers, %d from the origin, dropped %v; want all %d from the seed", bs.PeerBytes, bs.OriginBytes, bs.Dropped, w.size())
		}
		return
	}
	if proxy.Injected() != 1 {
		t.Fatalf("%d corruptions injected, want 1", proxy.Injected())
	}
	bad := peertest.IP(3) + ":" + w.port + ": corrupt"
	// A file-level refetch would read all of big.bin again; a part-level one reads the bad part (and
	// the chunk the proxy had in flight). Under a slow run the seed's held Lease can lapse, and the late
	// node then reads the held parts 3-4 from the origin too: still less than the file.
	if !slices.Contains(bs.Dropped, bad) || bs.OriginBytes < partSize || bs.OriginBytes >= int64(len(w.files[big])) {
		t.Errorf("late node dropped %v and read %d bytes from the origin; want %s dropped and the bad part read again (%d), not all %d of %s",
			bs.Dropped, bs.OriginBytes, bad, partSize, len(w.files[big]), big)
	}
}
