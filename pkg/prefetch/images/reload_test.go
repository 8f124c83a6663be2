package images_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images"
	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
	"warmd.io/warmd/pkg/state/statetest"
)

// TestReloadOfImagePullSettings edits each imagePull setting in a running manager, as a reload of
// the NodeConfig does, and checks that the edit takes effect without a restart (issue 26 item 1;
// pkg/assemble's walk of every setting names these tests). The embedded backend runs them: what is
// reloaded is the manager's, the same on every backend.
func TestReloadOfImagePullSettings(t *testing.T) {
	var emb backend
	for _, b := range backends {
		if b.name == "embedded" {
			emb = b
		}
	}

	t.Run("concurrency raised: the pulls already queued start", func(t *testing.T) {
		reg := imagetest.NewRegistry(t, imagetest.Options{})
		var list []config.Image
		for i := range 3 {
			repo := fmt.Sprintf("warmd-reload/c%d:v1", i)
			reg.PushRandom(t, repo, 16<<10, 1)
			list = append(list, config.Image{Ref: reg.Ref(repo)})
		}
		entered, release := reg.Gate()
		defer release()
		cfg := newConfig(t, emb, func(c *config.NodeConfig) { c.Images, c.ImagePull.Concurrency = list, 1 })
		h := start(t, cfg, images.Options{})
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatal("no pull reached the registry")
		}
		// One slot: the other two stay queued however long the first is held.
		for range 10 {
			if n := reg.HeldRepositories(); n != 1 {
				t.Fatalf("%d pulls in flight with imagePull.concurrency 1", n)
			}
			time.Sleep(30 * time.Millisecond)
		}
		next := *cfg
		next.ImagePull.Concurrency = 3
		h.m.Reconfigure(&next)
		deadline := time.Now().Add(10 * time.Second)
		for reg.HeldRepositories() != 3 {
			if time.Now().After(deadline) {
				t.Fatalf("%d pulls in flight 10s after a reload raised imagePull.concurrency to 3, want 3 (the queued ones stay on the old slot)", reg.HeldRepositories())
			}
			time.Sleep(10 * time.Millisecond)
		}
		release()
		statetest.Wait(t, h.store, prefetch.ImagesSection, func(s prefetch.ImagesStatus) bool {
			for _, im := range list {
				if !ready(im.Ref, "")(s) {
					return false
				}
			}
			return true
		})
	})

	t.Run("onRemove edited with the removal: the new policy releases the image", func(t *testing.T) {
		reg := imagetest.NewRegistry(t, imagetest.Options{})
		reg.PushRandom(t, "warmd-reload/leaving:v1", 16<<10, 1)
		reg.PushRandom(t, "warmd-reload/staying:v1", 16<<10, 1)
		cfg := newConfig(t, emb, func(c *config.NodeConfig) {
			c.Images = []config.Image{{Ref: reg.Ref("warmd-reload/leaving:v1")}, {Ref: reg.Ref("warmd-reload/staying:v1")}}
		})
		if cfg.ImagePull.OnRemove != prefetch.OnRemoveRemove {
			t.Fatalf("the test starts from onRemove %q, want remove", cfg.ImagePull.OnRemove)
		}
		h := start(t, cfg, images.Options{})
		st := statetest.Wait(t, h.store, prefetch.ImagesSection, func(s prefetch.ImagesStatus) bool {
			return ready(reg.Ref("warmd-reload/leaving:v1"), "")(s) && ready(reg.Ref("warmd-reload/staying:v1"), "")(s)
		})
		leaving, _ := st.ForRef(reg.Ref("warmd-reload/leaving:v1"))
		next := *cfg
		next.Images = []config.Image{{Ref: reg.Ref("warmd-reload/staying:v1")}}
		next.ImagePull.OnRemove = prefetch.OnRemoveUnpin
		h.m.Reconfigure(&next)
		statetest.Wait(t, h.store, prefetch.ImagesSection, func(s prefetch.ImagesStatus) bool { return len(s.Images) == 1 })
		bk, err := images.Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer bk.Close()
		// remove (the old policy) would have deleted it; unpin leaves it, neither pinned nor managed.
		l, err := bk.Lookup(t.Context(), leaving.Name)
		if err != nil {
			t.Fatalf("the image that left the config is gone (%v): the old policy, remove, was applied", err)
		}
		if l.Pinned || l.Managed {
			t.Errorf("the image that left the config is %+v, want unpinned and unmanaged (onRemove: unpin)", l)
		}
	})

	t.Run("resolveInterval shortened: the wait under way follows", func(t *testing.T) {
		reg := imagetest.NewRegistry(t, imagetest.Options{})
		v1 := reg.PushRandom(t, "warmd-reload/moving:latest", 16<<10, 1)
		cfg := newConfig(t, emb, func(c *config.NodeConfig) {
			c.Images = []config.Image{{Ref: reg.Ref("warmd-reload/moving:latest")}}
		})
		if cfg.ImagePull.ResolveInterval.Duration != time.Hour {
			t.Fatalf("the test starts from resolveInterval %s, want 1h", cfg.ImagePull.ResolveInterval.Duration)
		}
		h := start(t, cfg, images.Options{VerifyInterval: 50 * time.Millisecond})
		statetest.Wait(t, h.store, prefetch.ImagesSection, ready(reg.Ref("warmd-reload/moving:latest"), imagetest.Digest(t, v1)))
		v2 := reg.PushRandom(t, "warmd-reload/moving:latest", 16<<10, 1)
		next := *cfg
		// Below the config's 10s floor (which a file may not go under), so the test is quick.
		next.ImagePull.ResolveInterval = metav1.Duration{Duration: 100 * time.Millisecond}
		h.m.Reconfigure(&next)
		// Without the reload the tag would be resolved again in an hour, after statetest's timeout.
		statetest.Wait(t, h.store, prefetch.ImagesSection, ready(reg.Ref("warmd-reload/moving:latest"), imagetest.Digest(t, v2)))
	})
}
