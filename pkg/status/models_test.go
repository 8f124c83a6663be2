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

// What a download in flight serves its peers already: whole files, and parts of others when any.
func TestServable(t *testing.T) {
	for _, tc := range []struct {
		in   prefetch.Servable
		want string
	}{
		{prefetch.Servable{Files: 3}, "serving peers before it publishes: 3 file(s) verified whole"},
		{prefetch.Servable{Files: 1, PartFiles: 2, PartBytes: 192 << 20}, "serving peers before it publishes: 1 file(s) verified whole, 192.0 MiB verified in parts of 2 more"},
	} {
		if got := servable(tc.in); got != tc.want {
			t.Errorf("servable(%+v)\n got  %q\n want %q", tc.in, got, tc.want)
		}
	}
}
