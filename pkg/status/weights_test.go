package status

import (
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/prefetch"
)

func TestWriteWeights(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   prefetch.WeightsStatus
		want []string
	}{
		{"progress and ready", prefetch.WeightsStatus{CacheRoot: "/var/lib/warmd/weights", UsedBytes: 3 << 30, BudgetBytes: 100 << 30, Models: []prefetch.ModelStatus{
			{Model: "Qwen/Qwen2.5-7B", Revision: "main", State: prefetch.StateDownloading, BytesDone: 1 << 30, BytesTotal: 4 << 30, BytesPerSecond: 1.5e9, ETASeconds: 2},
			{Model: "acme/small", Revision: "r1", State: prefetch.StateReady, BytesDone: 1 << 20, BytesTotal: 1 << 20, SnapshotPath: "/var/lib/warmd/weights/models--acme--small/snapshots/r1"},
		}}, []string{"WEIGHTS in /var/lib/warmd/weights (3.0GiB used, budget 100.0GiB)", "1.0GiB/4.0GiB 25%", "1.50 GB/s", "2s", "models--acme--small/snapshots/r1"}},
		{"failure reason", prefetch.WeightsStatus{CacheRoot: "/w", Models: []prefetch.ModelStatus{
			{Model: "acme/bad", Revision: "main", State: prefetch.StateFailed, Reason: "model layout invalid: shard x missing\nmore"},
		}}, []string{"no budget", "failed", "acme/bad: model layout invalid: shard x missing …"}},
		{"nothing wanted", prefetch.WeightsStatus{CacheRoot: "/w"}, []string{"(no models wanted on this node)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteWeights(&b, tc.in, time.Now()); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
}
