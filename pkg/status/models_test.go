package status

import (
	"testing"

	"warmd.io/warmd/pkg/prefetch"
)

// A download with peers says how many bytes came from which peers and from the origin, and who was
// dropped.
func TestByteSources(t *testing.T) {
	got := byteSources(prefetch.ByteSources{PeerBytes: 3 << 30, OriginBytes: 16 << 20,
		Peers: []string{"10.0.0.1:9401", "10.0.0.2:9401"}, Dropped: []string{"10.0.0.3:9401: corrupt"}})
	want := "bytes: 3.0 GiB from 2 peer(s) (10.0.0.1:9401, 10.0.0.2:9401), 16.0 MiB from the origin; dropped 10.0.0.3:9401: corrupt"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}
