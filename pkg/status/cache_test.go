package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/cache"
)

func TestWriteCache(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ago := now.Add(-90 * time.Second)
	for _, tc := range []struct {
		name string
		s    cache.Status
		want []string
	}{
		{"waiting", cache.Status{State: "waiting", Message: "SKU key \"none\" does not identify a GPU"}, []string{"COMPILE CACHES: waiting - SKU key"}},
		{"ready", cache.Status{State: "ready", SKU: "h200-x", Root: "/var/lib/warmd/compile-cache/h200-x", Remote: "s3://b/p",
			Bytes: 3 << 30, Budget: 10 << 30, BundlesLocal: 4,
			Components: []cache.ComponentStatus{{Name: "flashinfer", Files: 12, Bytes: 3 << 30, Bundles: 4}},
			Stats: cache.Stats{LastRestore: &ago, Restored: 4, RemoteBundles: 6, Misses: 1, LastMiss: "vLLM used cache dir 22 but",
				Refused: []string{"triton/abc: built on SKU h100"}}},
			[]string{"SKU h200-x (ready): shared via s3://b/p, 3.0 GiB", "budget 10.0 GiB", "flashinfer  12", "4 local, 6 in the bucket",
				"last capture never, last restore 1m30s ago", "1 missed after restore", "last miss: vLLM used cache dir 22", "refused: triton/abc: built on SKU h100"}},
		{"from peers", cache.Status{State: "ready", SKU: "h200-x", KeptBundles: 3, KeptBytes: 96 << 20,
			Stats: cache.Stats{PeerBytes: 64 << 20, OriginBytes: 32 << 20, PeersDropped: 1}},
			[]string{"restored bytes: 64.0 MiB from peers, 32.0 MiB from the bucket; 1 peer(s) dropped; 3 bundle(s) (96.0 MiB) kept for peers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteCache(&buf, tc.s, now); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(buf.String(), w) {
					t.Fatalf("output lacks %q:\n%s", w, buf.String())
				}
			}
		})
	}
}
