// Package imagestest is the conformance suite every prefetch.Images backend passes: containerd 2.x
// (Transfer API), containerd 1.6 (Pull API) and the embedded content store run the same cases against
// the same in-process registry, so what the images part relies on (resolve, platform selection,
// pinned and present checks, release policies, errors) cannot drift between backends. Behaviour only
// one backend has (the CRI seeing the pin, mirrors, killed daemons) stays in that backend's tests.
package imagestest

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"

	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
)

// Backend is a backend under test and a look into its blob store.
type Backend struct {
	prefetch.Images
	// HasBlob reports whether the backend's content store holds d (to check which platform's layers
	// were fetched and that a remove let them go).
	HasBlob func(ctx context.Context, d digest.Digest) bool
}

// NewBackend builds a fresh backend for one case; it may register cleanups on t (a shared containerd
// daemon must be left as found: imagetest.CleanupDaemon for reg).
type NewBackend func(t *testing.T, reg *imagetest.Registry) Backend

// Run runs the suite. The registry is in-process; the backend is built once for all cases, as the
// images part builds one.
func Run(t *testing.T, newBackend NewBackend) {
	reg := imagetest.NewRegistry(t, imagetest.Options{})
	b := newBackend(t, reg)
	if b.Backend().Name == "" {
		t.Errorf("Backend() names no backend: %+v", b.Backend())
	}

	t.Run("pull by tag: present, pinned, managed, every layer fetched", func(t *testing.T) {
		img := reg.PushRandom(t, "warmd-conf/tag:v1", 64<<10, 3)
		r, last := pull(t, b, reg.Ref("warmd-conf/tag:v1"))
		if got, want := r.Target.Digest.String(), imagetest.Digest(t, img); got != want {
			t.Errorf("resolved %s, pushed %s", got, want)
		}
		if r.ByDigest {
			t.Errorf("a tag resolved as ByDigest")
		}
		layers := imagetest.LayerDigests(t, img)
		if len(last.Layers) != len(layers) {
			t.Errorf("progress reported %d layers, want %d", len(last.Layers), len(layers))
		}
		for i, l := range last.Layers {
			if !l.Complete || l.Done != l.Size {
				t.Errorf("layer %d progress %+v, want complete", i, l)
			}
		}
		for _, d := range layers {
			if !b.HasBlob(t.Context(), digest.Digest(d)) {
				t.Errorf("layer %s missing after pull", d)
			}
		}
		l, err := b.Lookup(t.Context(), r.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Pinned || !l.Managed || !l.Unpacked || l.Digest != r.Target.Digest || l.Name != r.Name {
			t.Errorf("lookup %+v: want %s pinned, managed, unpacked at %s", l, r.Name, r.Target.Digest)
		}
		managed, err := b.Managed(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(managed, func(m prefetch.Local) bool { return m.Name == r.Name && m.Digest == r.Target.Digest }) {
			t.Errorf("Managed() = %+v, does not list %s", managed, r.Name)
		}
	})

	t.Run("pull by digest", func(t *testing.T) {
		img := reg.PushRandom(t, "warmd-conf/digest:v1", 32<<10, 2)
		d := imagetest.Digest(t, img)
		r, _ := pull(t, b, reg.Host+"/warmd-conf/digest@"+d)
		if !r.ByDigest || r.Target.Digest.String() != d {
			t.Errorf("resolved %+v, want ByDigest at %s", r, d)
		}
		l, err := b.Lookup(t.Context(), r.Name)
		if err != nil || !l.Pinned || !l.Unpacked || l.Digest.String() != d {
			t.Errorf("lookup %s: %+v, %v", r.Name, l, err)
		}
	})

	t.Run("multi-platform index: only the node's platform is fetched", func(t *testing.T) {
		plats := []string{"linux/s390x", runtime.GOOS + "/" + runtime.GOARCH, "linux/ppc64le"}
		idx, imgs := reg.PushIndex(t, "warmd-conf/index:v1", 32<<10, 2, plats...)
		r, last := pull(t, b, reg.Ref("warmd-conf/index:v1"))
		if r.Target.Digest.String() != imagetest.Digest(t, idx) {
			t.Errorf("target %s is not the index %s", r.Target.Digest, imagetest.Digest(t, idx))
		}
		if r.Manifest.Digest.String() != imagetest.Digest(t, imgs[1]) {
			t.Errorf("platform manifest %s, want the %s one %s", r.Manifest.Digest, plats[1], imagetest.Digest(t, imgs[1]))
		}
		if len(last.Layers) != 2 {
			t.Errorf("progress reported %d layers, want the one platform's 2", len(last.Layers))
		}
		for i, img := range imgs {
			for _, ld := range imagetest.LayerDigests(t, img) {
				if got := b.HasBlob(t.Context(), digest.Digest(ld)); got != (i == 1) {
					t.Errorf("layer %s of %s: present=%v, want %v", ld, plats[i], got, i == 1)
				}
			}
		}
	})

	t.Run("remove deletes the image and its layers", func(t *testing.T) {
		img := reg.PushRandom(t, "warmd-conf/removed:v1", 32<<10, 2)
		r, _ := pull(t, b, reg.Ref("warmd-conf/removed:v1"))
		if err := b.Release(t.Context(), r.Name, prefetch.OnRemoveRemove); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Lookup(t.Context(), r.Name); !errors.Is(err, prefetch.ErrNotFound) {
			t.Errorf("lookup after remove: %v, want prefetch.ErrNotFound", err)
		}
		for _, ld := range imagetest.LayerDigests(t, img) {
			if b.HasBlob(t.Context(), digest.Digest(ld)) {
				t.Errorf("layer %s still stored after remove", ld)
			}
		}
		if err := b.Release(t.Context(), r.Name, prefetch.OnRemoveRemove); err != nil {
			t.Errorf("a second remove of an absent image: %v, want nil", err)
		}
	})

	t.Run("unpin keeps the image, drops warmd's claim; a later remove leaves it", func(t *testing.T) {
		reg.PushRandom(t, "warmd-conf/unpinned:v1", 32<<10, 1)
		r, _ := pull(t, b, reg.Ref("warmd-conf/unpinned:v1"))
		if err := b.Release(t.Context(), r.Name, prefetch.OnRemoveUnpin); err != nil {
			t.Fatal(err)
		}
		l, err := b.Lookup(t.Context(), r.Name)
		if err != nil {
			t.Fatal(err)
		}
		if l.Pinned || l.Managed || !l.Unpacked {
			t.Errorf("after unpin: %+v, want present, unpacked, not pinned, not managed", l)
		}
		if err := b.Release(t.Context(), r.Name, prefetch.OnRemoveRemove); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Lookup(t.Context(), r.Name); err != nil {
			t.Errorf("an image warmd no longer manages was removed: %v", err)
		}
	})

	t.Run("keep leaves the image pinned and managed", func(t *testing.T) {
		reg.PushRandom(t, "warmd-conf/kept:v1", 32<<10, 1)
		r, _ := pull(t, b, reg.Ref("warmd-conf/kept:v1"))
		if err := b.Release(t.Context(), r.Name, prefetch.OnRemoveKeep); err != nil {
			t.Fatal(err)
		}
		if l, err := b.Lookup(t.Context(), r.Name); err != nil || !l.Pinned || !l.Managed {
			t.Errorf("after keep: %+v, %v", l, err)
		}
	})

	t.Run("a missing image is a clear not-found error", func(t *testing.T) {
		ref := reg.Ref("warmd-conf/never-pushed:v1")
		_, err := b.Resolve(t.Context(), ref)
		if err == nil {
			t.Fatal("resolve of an image the registry does not have succeeded")
		}
		if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "warmd-conf/never-pushed:v1") {
			t.Errorf("resolve error %q: want a not-found error naming the image", err)
		}
		if _, err := b.Lookup(t.Context(), ref); !errors.Is(err, prefetch.ErrNotFound) {
			t.Errorf("lookup of an image never pulled: %v, want prefetch.ErrNotFound", err)
		}
	})
}

// pull resolves and pulls ref, returning what was resolved and the last progress seen; the image is
// removed when the test ends.
func pull(t *testing.T, b Backend, ref string) (prefetch.Resolved, prefetch.Progress) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := b.Resolve(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	var last prefetch.Progress
	if err := b.Pull(ctx, r, func(p prefetch.Progress) { last = p }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Unpinned images are not warmd's to remove; the backend's own cleanup drops them.
		_ = b.Release(context.Background(), r.Name, prefetch.OnRemoveRemove)
	})
	return r, last
}
