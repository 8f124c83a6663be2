package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// verifyOptions say what a built layout must satisfy.
type verifyOptions struct {
	Layout  string
	Version string // `warmd version` must print it
	// Platforms that must be present (all of them are run).
	Platforms []string
	// Qemu is the directory holding qemu-<arch>-static for architectures the host cannot run.
	QemuDir string
	Log     io.Writer
	// Checks, when set, replace the commands run in each image (tests run a tiny program).
	Checks []check
}

// check is one command run in the image as a user, and what its output must contain.
type check struct {
	args []string
	uid  int
	want []string
}

// verify unpacks every platform's image of the layout into a scratch root and runs the binary there:
// as root, in a chroot holding nothing but the image (so a library the image lacks fails here, not
// on a node), natively for the host's architecture and under qemu-user for the other one. Without
// root it falls back to the loader's --library-path (amd64) and qemu's -L prefix, which prove less
// (the host's own libraries could fill a gap) and says so.
func verify(ctx context.Context, o verifyOptions) error {
	lp, err := layout.FromPath(o.Layout)
	if err != nil {
		return fmt.Errorf("open OCI layout %s: %w (run make image first)", o.Layout, err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return err
	}
	if len(im.Manifests) != 1 {
		return fmt.Errorf("%s/index.json holds %d entries, want 1 (the warmd image index)", o.Layout, len(im.Manifests))
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	found := map[string]v1.Hash{}
	for _, d := range m.Manifests {
		if d.Platform != nil {
			found[d.Platform.OS+"/"+d.Platform.Architecture] = d.Digest
		}
	}
	for _, p := range o.Platforms {
		h, ok := found[p]
		if !ok {
			return fmt.Errorf("the image has no %s manifest (has %v)", p, keys(found))
		}
		img, err := idx.Image(h)
		if err != nil {
			return err
		}
		if err := verifyPlatform(ctx, p, img, o); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

func keys(m map[string]v1.Hash) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func verifyPlatform(ctx context.Context, p string, img v1.Image, o verifyOptions) error {
	a, err := platformName(p)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	if cf.Architecture != a.goarch || cf.OS != "linux" {
		return fmt.Errorf("config says %s/%s", cf.OS, cf.Architecture)
	}
	for _, k := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.source"} {
		if cf.Config.Labels[k] == "" {
			return fmt.Errorf("label %s is missing", k)
		}
	}
	root, err := os.MkdirTemp("", "imagebuild-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if err := os.Chmod(root, 0o755); err != nil { // it is / in the chroot, where uid 65532 must traverse it
		return err
	}
	if err := unpack(mutate.Extract(img), root); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	checks := o.Checks
	if checks == nil {
		osArch := "linux/" + a.goarch + ")"
		checks = []check{
			{args: []string{binPath, "version"}, uid: nonrootUID, want: []string{"warmd " + o.Version + " (", osArch}},
			// NVML is absent in the image (the NVIDIA toolkit mounts it on GPU nodes): the null path.
			{args: []string{binPath, "gpu", "-o", "json"}, uid: 0, want: []string{`"sku": "none"`}},
		}
	}
	native := a.goarch == runtime.GOARCH
	chroot := os.Geteuid() == 0
	var qemu string
	if !native {
		qemu, err = exec.LookPath(filepath.Join(o.QemuDir, a.qemu))
		if o.QemuDir == "" {
			qemu, err = exec.LookPath(a.qemu)
		}
		if err != nil {
			return fmt.Errorf("%s is needed to run the %s binary here: %w (apt-get install qemu-user-static)", a.qemu, p, err)
		}
		if chroot { // a static qemu runs inside the chroot, which then holds nothing but the image and it
			if err := copyInto(qemu, filepath.Join(root, ".imagebuild-qemu")); err != nil {
				return err
			}
		}
	}
	how := "chroot into the image"
	if !chroot {
		how = "not root: loader/qemu library prefix (weaker than a chroot)"
	}
	for _, c := range checks {
		cmd := command(ctx, root, a, native, chroot, qemu, c)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		got := out.String()
		if err != nil {
			return fmt.Errorf("%s as uid %d (%s): %w\n%s", strings.Join(c.args, " "), c.uid, how, err, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				return fmt.Errorf("%s printed %q, want it to contain %q", strings.Join(c.args, " "), got, w)
			}
		}
		first, _, _ := strings.Cut(strings.TrimSpace(got), "\n")
		for _, line := range strings.Split(got, "\n") {
			if len(c.want) > 0 && strings.Contains(line, c.want[len(c.want)-1]) {
				first = strings.TrimSpace(line)
				break
			}
		}
		fmt.Fprintf(o.Log, "imagebuild: verify %s: `%s` as uid %d ok in %s (%s): %s\n", p,
			strings.Join(c.args, " "), c.uid, time.Since(start).Round(time.Millisecond), how, first)
	}
	return nil
}

func command(ctx context.Context, root string, a arch, native, chroot bool, qemu string, c check) *exec.Cmd {
	var cmd *exec.Cmd
	switch {
	case chroot && native:
		cmd = exec.CommandContext(ctx, c.args[0], c.args[1:]...)
	case chroot:
		cmd = exec.CommandContext(ctx, "/.imagebuild-qemu", c.args...)
	case native: // the image's own loader with only the image's lib dir
		loader := loaderOf(root, a)
		args := append([]string{"--inhibit-cache", "--library-path", filepath.Join(root, a.libDir()), filepath.Join(root, c.args[0])}, c.args[1:]...)
		cmd = exec.CommandContext(ctx, loader, args...)
	default:
		cmd = exec.CommandContext(ctx, qemu, append([]string{"-L", root, filepath.Join(root, c.args[0])}, c.args[1:]...)...)
	}
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/"}
	if chroot {
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.uid)}}
	}
	return cmd
}

func loaderOf(root string, a arch) string {
	if a.goarch == "amd64" {
		return filepath.Join(root, "lib64", "ld-linux-x86-64.so.2")
	}
	return filepath.Join(root, "lib", "ld-linux-aarch64.so.1")
}

// unpack writes a flattened image tar under root. The tar is our own image, but names are still
// checked to stay inside root.
func unpack(rc io.ReadCloser, root string) error {
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean("/" + h.Name)
		if name == "/" {
			continue
		}
		dst := filepath.Join(root, filepath.FromSlash(name))
		if h.Uid != 0 && !strings.HasPrefix(name, "/home/nonroot") {
			return fmt.Errorf("%s is owned by uid %d: everything but the nonroot home must be root's", name, h.Uid)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, dst); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("%s: unexpected tar entry type %q", name, h.Typeflag)
		}
		if err := os.Chmod(dst, os.FileMode(h.Mode)&os.ModePerm|sticky(h.Mode)); err != nil {
			return err
		}
		if err := os.Lchown(dst, h.Uid, h.Gid); err != nil && os.Geteuid() == 0 {
			return err
		}
	}
}

func sticky(mode int64) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

func copyInto(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
