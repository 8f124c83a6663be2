package containerd_test

import (
	"os"
	"path/filepath"
	"testing"

	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
	"warmd.io/warmd/pkg/prefetch/images/oci"
)

// TestMirrorWithOriginDown is a Spegel-style setup: the node's hosts.toml sends pulls for the origin
// registry to a mirror first (as Spegel's or a pull-through cache's does), and the origin is down. The
// pull must come from the mirror on every API path: containerd 2.x's Transfer service (which has been
// reported to ignore hosts.toml; warmd passes the hosts dir to it explicitly), warmd's parallel path
// and 1.6's client pull.
func TestMirrorWithOriginDown(t *testing.T) {
	for _, d := range daemons {
		t.Run(d.name, func(t *testing.T) {
			socket := d.socket(t)
			origin := imagetest.NewRegistry(t, imagetest.Options{})
			mirror := imagetest.NewRegistry(t, imagetest.Options{})
			imagetest.CleanupDaemon(t, socket, "k8s.io", mirror)
			img := origin.PushRandom(t, "warmd-img/mirrored-origin-down:v1", 96<<10, 3)
			mirror.Push(t, "warmd-img/mirrored-origin-down:v1", img) // what the mirror has cached
			ref := origin.Ref("warmd-img/mirrored-origin-down:v1")

			hosts := t.TempDir()
			dir := filepath.Join(hosts, origin.Host)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			toml := "server = \"http://" + origin.Host + "\"\n\n[host.\"http://" + mirror.Host + "\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
			if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o644); err != nil {
				t.Fatal(err)
			}
			origin.Close()

			b := newBackend(t, socket, d.path, oci.Registry{HostsDir: hosts})
			if b.Path() != d.wantPath {
				t.Fatalf("API path %q, want %q", b.Path(), d.wantPath)
			}
			r, _ := pull(t, b, ref)
			if got, want := r.Target.Digest.String(), imagetest.Digest(t, img); got != want {
				t.Errorf("resolved %s through the mirror, want %s", got, want)
			}
			l, err := b.Lookup(t.Context(), ref)
			if err != nil || !l.Unpacked || !l.Pinned {
				t.Errorf("image pulled through the mirror with the origin down: %+v, %v", l, err)
			}

			// Without the hosts dir the same pull has nowhere to go: the mirror, not luck, served it.
			plain := newBackend(t, socket, d.path, oci.Registry{})
			if _, err := plain.Resolve(t.Context(), ref); err == nil {
				t.Error("resolve without the hosts dir succeeded with the origin down")
			}
		})
	}
}
