package imagetest

import (
	"context"
	"testing"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
)

// CleanupDaemon removes from the shared daemon at socket, when the test ends, every image record in
// namespace ns that points at something reg served, including the CRI's aliases and digests a
// moved tag left behind, so tests leave the shared daemons as they found them. Register it right
// after NewRegistry: cleanups run last-registered first, so it runs after the code under test stops.
func CleanupDaemon(t testing.TB, socket, ns string, reg *Registry) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := client.New(socket, client.WithDefaultNamespace(ns))
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		defer c.Close()
		is := c.ImageService()
		for _, d := range reg.Pushed() {
			imgs, err := is.List(ctx, "target.digest=="+d)
			if err != nil {
				continue
			}
			for i, img := range imgs {
				var opts []images.DeleteOpt
				if i == len(imgs)-1 {
					opts = append(opts, images.SynchronousDelete())
				}
				_ = is.Delete(ctx, img.Name, opts...)
			}
		}
	})
}
