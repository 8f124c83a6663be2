package main

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"warmd.io/warmd/internal/testenv"
)

// hello is a tiny cgo program standing in for warmd (building warmd twice here would cost minutes):
// it links glibc dynamically exactly as warmd does and answers `version`.
const hello = `package main

/*
#include <stdio.h>
static int answer(void) { return 42; }
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Printf("hello %d %s/%s uid %d\n", int(C.answer()), runtime.GOOS, runtime.GOARCH, os.Getuid())
	}
}
`

// buildHello compiles hello for goarch with cgo (cross-compiling with Debian's aarch64 gcc).
func buildHello(t *testing.T, goarch string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(hello), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := "gcc"
	if goarch != runtime.GOARCH {
		cc = arches[goarch].triplet + "-gcc"
		if _, err := exec.LookPath(cc); err != nil {
			testenv.Unavailable(t, cc+" is not installed (scripts/tools.sh debian installs gcc-aarch64-linux-gnu)")
		}
	}
	out := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOOS=linux", "GOARCH="+goarch, "CC="+cc, "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build hello for %s: %v\n%s", goarch, err, b)
	}
	return out
}

// TestImagePipeline builds a two-platform image of a real cgo binary, checks what went in, runs
// both platforms in a chroot of the image (arm64 under qemu-user), pushes it to a registry, and
// builds it again to the same digest.
func TestImagePipeline(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the pipeline test cross-compiles from amd64")
	}
	qemuDir := testenv.QemuDir(t)
	cross := "/usr/aarch64-linux-gnu" // the cross toolchain's sysroot: a /lib layout like an unpacked libc6
	if _, err := os.Stat(filepath.Join(cross, "lib", "libc.so.6")); err != nil {
		testenv.Unavailable(t, "libc6-dev-arm64-cross is not installed (scripts/tools.sh debian)")
	}
	bins := map[string]string{"linux/amd64": buildHello(t, "amd64"), "linux/arm64": buildHello(t, "arm64")}
	o := buildOptions{
		Out: filepath.Join(t.TempDir(), "image"), Tag: "v0.0.0-test", Binaries: bins,
		Sysroots: map[string]string{"linux/arm64": cross}, CABundle: "/etc/ssl/certs/ca-certificates.crt",
		Version: "v0.0.0-test", Revision: "0123abc", Source: "https://example.invalid/warmd",
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Log: io.Discard,
	}
	if _, err := os.Stat(o.CABundle); err != nil {
		testenv.Unavailable(t, "no CA bundle at "+o.CABundle+" (apt-get install ca-certificates)")
	}
	reg := httptest.NewServer(registry.New())
	defer reg.Close()
	ref := strings.TrimPrefix(reg.URL, "http://") + "/warmd/warmd:v0.0.0-test"
	o.Push = ref
	ctx := context.Background()
	res, err := build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Platforms) != 2 {
		t.Fatalf("platforms %+v", res.Platforms)
	}
	for _, p := range res.Platforms {
		want := map[string][]string{
			"linux/amd64": {"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"},
			"linux/arm64": {"/lib/ld-linux-aarch64.so.1", "/lib/aarch64-linux-gnu/libc.so.6"},
		}[p.Platform]
		if strings.Join(p.Libs, " ") != strings.Join(want, " ") {
			t.Errorf("%s libs %v, want exactly %v (the loader and DT_NEEDED)", p.Platform, p.Libs, want)
		}
	}

	// The pushed index is the layout's.
	r, _ := name.ParseReference(ref)
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d != res.Digest {
		t.Errorf("pushed %s, built %s", d, res.Digest)
	}
	m, _ := idx.IndexManifest()
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		if cf.Config.Labels["org.opencontainers.image.revision"] != "0123abc" || cf.Config.User != "65532:65532" || cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s config: labels %v user %q arch %s", d.Platform.Architecture, cf.Config.Labels, cf.Config.User, cf.Architecture)
		}
		files := map[string]*tar.Header{}
		tr := tar.NewReader(mutate.Extract(img))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files["/"+strings.TrimSuffix(h.Name, "/")] = h
		}
		for _, f := range []string{binPath, "/etc/passwd", "/etc/group", "/etc/ssl/certs/ca-certificates.crt", "/tmp", "/home/nonroot"} {
			if files[f] == nil {
				t.Errorf("%s image lacks %s", d.Platform.Architecture, f)
			}
		}
		if h := files["/tmp"]; h != nil && h.Mode&0o1777 != 0o1777 {
			t.Errorf("/tmp mode %o", h.Mode)
		}
		if h := files["/home/nonroot"]; h != nil && h.Uid != nonrootUID {
			t.Errorf("/home/nonroot owned by %d", h.Uid)
		}
		if d.Platform.Architecture == "amd64" && files["/var/lib/dpkg/status.d/libc6"] == nil {
			t.Error("amd64 image lacks the dpkg status of the glibc it ships (scanners read it)")
		}
	}

	// Both platforms run in a chroot holding only the image, as the nonroot user and as root.
	checks := []check{
		{args: []string{binPath, "version"}, uid: nonrootUID, want: []string{"hello 42 linux/", "uid 65532"}},
		{args: []string{binPath, "version"}, uid: 0, want: []string{"uid 0"}},
	}
	if err := verify(ctx, verifyOptions{Layout: o.Out, Version: o.Version, Platforms: []string{"linux/amd64", "linux/arm64"},
		QemuDir: qemuDir, Log: io.Discard, Checks: checks}); err != nil {
		t.Fatal(err)
	}
	// A check that cannot pass fails (the verify step is not a rubber stamp).
	bad := []check{{args: []string{binPath, "version"}, uid: nonrootUID, want: []string{"warmd v9"}}}
	if err := verify(ctx, verifyOptions{Layout: o.Out, Version: o.Version, Platforms: []string{"linux/arm64"}, QemuDir: qemuDir,
		Log: io.Discard, Checks: bad}); err == nil || !strings.Contains(err.Error(), "want it to contain") {
		t.Errorf("verify with a wrong expectation: %v", err)
	}

	// Same inputs, same digest.
	o.Out, o.Push = filepath.Join(t.TempDir(), "image"), ""
	again, err := build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != res.Digest {
		t.Errorf("rebuild gave %s, first build %s: the image is not reproducible", again.Digest, res.Digest)
	}
}

// TestWrongInputsFailClearly: a binary for the other architecture and a sysroot without its
// libraries are refused with a message naming the fix.
func TestWrongInputsFailClearly(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	if _, err := elfDeps(self, arches[other], sysroot{dir: "/"}); err == nil || !strings.Contains(err.Error(), "rebuild it for this platform") {
		t.Errorf("wrong-arch binary: %v", err)
	}
	// This test binary is static or dynamic depending on the toolchain; a cgo one needs libc.
	if _, err := elfDeps(self, arches[runtime.GOARCH], sysroot{dir: t.TempDir()}); err != nil && !strings.Contains(err.Error(), "not found in sysroot") {
		t.Errorf("empty sysroot: %v", err)
	}
	if _, err := platformName("linux/riscv64"); err == nil {
		t.Error("an unknown platform was accepted")
	}
}
