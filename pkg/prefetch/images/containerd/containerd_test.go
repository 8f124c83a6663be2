package containerd_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/containerd"
	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
	"warmd.io/warmd/pkg/prefetch/images/oci"
)

// daemon is one real containerd the suite runs against.
type daemon struct {
	name     string
	socket   func(testing.TB) string
	wantPath string
	// path forces an API path ("" detects).
	path string
	// criPinned: only containerd 2.x's CRI reports the pin (1.6.20 ignores the label).
	criPinned bool
}

var daemons = []daemon{
	{name: "containerd-2.4", socket: testenv.Containerd, wantPath: containerd.PathTransfer, criPinned: true},
	{name: "containerd-2.4-parallel", socket: testenv.Containerd, path: containerd.PathParallel, wantPath: containerd.PathParallel, criPinned: true},
	{name: "containerd-2.4-warmd", socket: testenv.Containerd, path: containerd.PathWarmd, wantPath: containerd.PathWarmd, criPinned: true},
	{name: "containerd-1.6", socket: testenv.Containerd16, wantPath: containerd.PathPull},
	// 1.6 has no Transfer API: the warmd path is refused by name and the daemon unpacks.
	{name: "containerd-1.6-warmd", socket: testenv.Containerd16, path: containerd.PathWarmd, wantPath: containerd.PathPull},
}

func newBackend(t *testing.T, socket, path string, reg oci.Registry) *containerd.Backend {
	t.Helper()
	b, err := containerd.New(t.Context(), containerd.Options{Address: socket, Namespace: "k8s.io", Snapshotter: "overlayfs", Registry: reg, Path: path, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// pull resolves and pulls ref, returning what was resolved and the last progress seen.
func pull(t *testing.T, b *containerd.Backend, ref string) (prefetch.Resolved, prefetch.Progress) {
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
	t.Cleanup(func() { _ = b.Release(context.Background(), r.Name, prefetch.OnRemoveRemove) })
	return r, last
}

func TestBackend(t *testing.T) {
	for _, d := range daemons {
		t.Run(d.name, func(t *testing.T) {
			socket := d.socket(t)
			reg := imagetest.NewRegistry(t, imagetest.Options{})
			imagetest.CleanupDaemon(t, socket, "k8s.io", reg)
			b := newBackend(t, socket, d.path, oci.Registry{})
			if b.Path() != d.wantPath {
				t.Fatalf("detected API path %q, want %q", b.Path(), d.wantPath)
			}
			if !strings.Contains(b.Backend().Detail, d.wantPath+" API") {
				t.Errorf("backend detail %q does not name the path", b.Backend().Detail)
			}

			t.Run("multi-layer image is pulled, unpacked, pinned and visible to the CRI", func(t *testing.T) {
				img := reg.PushRandom(t, "warmd-img/multi:v1", 256<<10, 4)
				r, last := pull(t, b, reg.Ref("warmd-img/multi:v1"))
				if got, want := r.Target.Digest.String(), imagetest.Digest(t, img); got != want {
					t.Errorf("resolved %s, pushed %s", got, want)
				}
				if len(last.Layers) != 4 {
					t.Fatalf("progress reported %d layers, want 4", len(last.Layers))
				}
				for i, l := range last.Layers {
					if !l.Complete || l.Done != l.Size {
						t.Errorf("layer %d progress %+v, want complete", i, l)
					}
				}
				l, err := b.Lookup(t.Context(), r.Name)
				if err != nil {
					t.Fatal(err)
				}
				if !l.Pinned || !l.Managed || !l.Unpacked || l.Digest != r.Target.Digest {
					t.Errorf("local %+v: want pinned, managed, unpacked at %s", l, r.Target.Digest)
				}
				st := criWait(t, socket, r.Name, func(im *runtimeapi.Image) bool { return im != nil && im.Pinned == d.criPinned })
				if st == nil {
					t.Fatalf("CRI ImageStatus(%s) found nothing", r.Name)
				}
				if st.Pinned != d.criPinned {
					t.Errorf("CRI reports pinned=%v, want %v", st.Pinned, d.criPinned)
				}
			})

			t.Run("multi-platform index pulls only the node's platform", func(t *testing.T) {
				idx, imgs := reg.PushIndex(t, "warmd-img/multiarch:v1", 128<<10, 2, "linux/arm64", "linux/amd64", "linux/s390x")
				r, _ := pull(t, b, reg.Ref("warmd-img/multiarch:v1"))
				if r.Target.Digest.String() != imagetest.Digest(t, idx) {
					t.Errorf("target %s is not the index", r.Target.Digest)
				}
				if r.Manifest.Digest.String() != imagetest.Digest(t, imgs[1]) {
					t.Errorf("platform manifest %s, want the linux/amd64 one %s", r.Manifest.Digest, imagetest.Digest(t, imgs[1]))
				}
				cs := b.Client().ContentStore()
				for i, img := range imgs {
					for _, ld := range imagetest.LayerDigests(t, img) {
						_, err := cs.Info(t.Context(), digest.Digest(ld))
						if present := err == nil; present != (i == 1) {
							t.Errorf("layer %s of image %d: present=%v, want %v", ld, i, present, i == 1)
						}
					}
				}
			})

			t.Run("private registry with a mounted dockerconfigjson", func(t *testing.T) {
				priv := imagetest.NewRegistry(t, imagetest.Options{User: "warmd", Pass: "s3cret"})
				imagetest.CleanupDaemon(t, socket, "k8s.io", priv)
				priv.PushRandom(t, "warmd-img/private:v1", 128<<10, 2)
				secretDir := t.TempDir() // a Secret volume: the key is a file in the dir
				if err := os.WriteFile(filepath.Join(secretDir, ".dockerconfigjson"), []byte(imagetest.DockerConfig(priv.Host, "warmd", "s3cret")), 0o600); err != nil {
					t.Fatal(err)
				}
				anon := newBackend(t, socket, d.path, oci.Registry{})
				if _, err := anon.Resolve(t.Context(), priv.Ref("warmd-img/private:v1")); err == nil {
					t.Fatal("resolve without credentials succeeded against a private registry")
				}
				authed := newBackend(t, socket, d.path, oci.Registry{Auth: oci.Auth{Files: []string{secretDir}}})
				r, _ := pull(t, authed, priv.Ref("warmd-img/private:v1"))
				if l, err := authed.Lookup(t.Context(), r.Name); err != nil || !l.Unpacked {
					t.Fatalf("private image: %+v, %v", l, err)
				}
			})

			t.Run("a registry mirror from a hosts.toml dir", func(t *testing.T) {
				img := reg.PushRandom(t, "warmd-img/mirrored:v1", 64<<10, 2)
				hosts := t.TempDir()
				if err := os.MkdirAll(filepath.Join(hosts, "warmd-mirror.test"), 0o755); err != nil {
					t.Fatal(err)
				}
				toml := "server = \"http://" + reg.Host + "\"\n[host.\"http://" + reg.Host + "\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
				if err := os.WriteFile(filepath.Join(hosts, "warmd-mirror.test", "hosts.toml"), []byte(toml), 0o644); err != nil {
					t.Fatal(err)
				}
				mb := newBackend(t, socket, d.path, oci.Registry{HostsDir: hosts})
				r, _ := pull(t, mb, "warmd-mirror.test/warmd-img/mirrored:v1")
				if r.Target.Digest.String() != imagetest.Digest(t, img) {
					t.Errorf("mirror served %s, want %s", r.Target.Digest, imagetest.Digest(t, img))
				}
				if l, err := mb.Lookup(t.Context(), "warmd-mirror.test/warmd-img/mirrored:v1"); err != nil || !l.Unpacked || !l.Pinned {
					t.Errorf("mirrored image: %+v, %v", l, err)
				}
			})

			t.Run("remove deletes every ref, including the CRI's", func(t *testing.T) {
				img := reg.PushRandom(t, "warmd-img/removed:v1", 128<<10, 2)
				r, _ := pull(t, b, reg.Ref("warmd-img/removed:v1"))
				// Let the CRI see it (and add its aliases) before removing.
				if criWait(t, socket, r.Name, func(im *runtimeapi.Image) bool { return im != nil }) == nil {
					t.Fatalf("CRI never saw %s", r.Name)
				}
				is := b.Client().ImageService()
				// A repo-digest ref as the CRI writes after its own pulls.
				alias := images.Image{Name: strings.Split(r.Name, ":v1")[0] + "@" + r.Target.Digest.String(), Target: r.Target}
				if _, err := is.Create(t.Context(), alias); err != nil && !errdefs.IsAlreadyExists(err) {
					t.Fatal(err)
				}
				before, err := is.List(t.Context(), "target.digest=="+r.Target.Digest.String())
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, im := range before {
					names = append(names, im.Name)
				}
				t.Logf("refs before remove: %v", names)
				if err := b.Release(t.Context(), r.Name, prefetch.OnRemoveRemove); err != nil {
					t.Fatal(err)
				}
				left, err := is.List(t.Context(), "target.digest=="+r.Target.Digest.String())
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range left {
					t.Errorf("ref %s still points at the removed image", l.Name)
				}
				if _, err := b.Lookup(t.Context(), r.Name); !errors.Is(err, prefetch.ErrNotFound) {
					t.Errorf("lookup after remove: %v, want ErrNotFound", err)
				}
				for _, ld := range imagetest.LayerDigests(t, img) {
					if _, err := b.Client().ContentStore().Info(t.Context(), digest.Digest(ld)); err == nil {
						t.Errorf("layer %s still in the content store after remove", ld)
					}
				}
				if st := criWait(t, socket, r.Name, func(im *runtimeapi.Image) bool { return im == nil }); st != nil {
					t.Errorf("CRI still reports %s after remove", r.Name)
				}
			})

			t.Run("unpin keeps the image but drops warmd's labels", func(t *testing.T) {
				reg.PushRandom(t, "warmd-img/unpinned:v1", 64<<10, 1)
				r, _ := pull(t, b, reg.Ref("warmd-img/unpinned:v1"))
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
				if st := criWait(t, socket, r.Name, func(im *runtimeapi.Image) bool { return im != nil && !im.Pinned }); st == nil || st.Pinned {
					t.Errorf("CRI after unpin: %+v, want present and not pinned", st)
				}
				// Not warmd's any more: a later remove must leave it alone.
				if err := b.Release(t.Context(), r.Name, prefetch.OnRemoveRemove); err != nil {
					t.Fatal(err)
				}
				if _, err := b.Lookup(t.Context(), r.Name); err != nil {
					t.Errorf("an unmanaged image was touched: %v", err)
				}
				_ = b.Client().ImageService().Delete(context.Background(), r.Name, images.SynchronousDelete())
			})
		})
	}
}

// criWait asks the CRI image service on the same socket, as the kubelet would, until done holds for
// its answer, and returns the last answer. The CRI plugin learns of images from containerd's events,
// asynchronously (1.6 visibly so), hence the wait; bounded at 30 s, after which the caller's check
// reports what the CRI last said.
func criWait(t *testing.T, socket, name string, done func(*runtimeapi.Image) bool) *runtimeapi.Image {
	t.Helper()
	svc, err := remote.NewRemoteImageService(t.Context(), "unix://"+socket, 10*time.Second, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	var im *runtimeapi.Image
	for i := 0; i < 600; i++ {
		resp, err := svc.ImageStatus(t.Context(), &runtimeapi.ImageSpec{Image: name}, false)
		if err != nil {
			t.Fatalf("CRI ImageStatus(%s): %v", name, err)
		}
		if im = resp.GetImage(); done(im) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return im
}
