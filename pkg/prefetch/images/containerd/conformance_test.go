package containerd_test

import (
	"context"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"warmd.io/warmd/pkg/prefetch/images/imagestest"
	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
	"warmd.io/warmd/pkg/prefetch/images/oci"
)

// TestConformance runs the Images suite against containerd 2.4 (Transfer and parallel paths) and 1.6 (Pull API).
func TestConformance(t *testing.T) {
	for _, d := range daemons {
		t.Run(d.name, func(t *testing.T) {
			socket := d.socket(t)
			imagestest.Run(t, func(t *testing.T, reg *imagetest.Registry) imagestest.Backend {
				imagetest.CleanupDaemon(t, socket, "k8s.io", reg)
				b := newBackend(t, socket, d.path, oci.Registry{})
				return imagestest.Backend{Images: b, HasBlob: func(ctx context.Context, d digest.Digest) bool {
					_, err := b.Client().ContentStore().Info(ctx, d)
					return err == nil
				}}
			})
		})
	}
}
