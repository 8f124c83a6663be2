package embedded_test

import (
	"context"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"warmd.io/warmd/pkg/prefetch/images/embedded"
	"warmd.io/warmd/pkg/prefetch/images/imagestest"
	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
)

// TestConformance runs the Images suite against the embedded store (a registry is all it needs).
func TestConformance(t *testing.T) {
	t.Parallel()
	imagestest.Run(t, func(t *testing.T, _ *imagetest.Registry) imagestest.Backend {
		s, err := embedded.New(embedded.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return imagestest.Backend{Images: s, HasBlob: func(ctx context.Context, d digest.Digest) bool {
			_, err := s.Content().Info(ctx, d)
			return err == nil
		}}
	})
}
