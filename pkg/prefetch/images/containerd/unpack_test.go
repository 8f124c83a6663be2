package containerd_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/opencontainers/image-spec/identity"
	"golang.org/x/sys/unix"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/containerd"
	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
)

// entry is one tar entry of a test layer.
type entry struct {
	h    tar.Header
	body string
}

func hdr(typ byte, name string, mode int64, extra ...func(*tar.Header)) tar.Header {
	h := tar.Header{Typeflag: typ, Name: name, Mode: mode, Uid: 1000, Gid: 1000, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
	for _, f := range extra {
		f(&h)
	}
	return h
}

// hardLayers are layers with everything the daemon's applier must get right: whiteouts, opaque
// dirs, hard links, symlinks, xattrs, file capabilities, setuid bits, devices, long names, an empty
// layer, gzip with several members, and implicit parent directories (ones a tar does not list but
// needs) that take their owner, mode and xattrs from a lower layer: found directly, through a
// symlink, described by a later header of the same tar, and under a setgid directory.
func hardLayers() [][]entry {
	long := strings.Repeat("d", 200) + "/" + strings.Repeat("f", 250)
	xattr := func(h *tar.Header) {
		h.PAXRecords = map[string]string{"SCHILY.xattr.user.warmd": "v1", "SCHILY.xattr.security.capability": string([]byte{1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})}
	}
	root := func(h *tar.Header) { h.Uid, h.Gid = 0, 0 }
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB, several deflate blocks
	return [][]entry{
		{
			{hdr(tar.TypeDir, "etc/", 0o755, root), ""},
			{hdr(tar.TypeReg, "etc/passwd", 0o644, root), "root:x:0:0::/root:/bin/sh\n"},
			{hdr(tar.TypeDir, "opt/", 0o755), ""},
			{hdr(tar.TypeDir, "opt/old/", 0o750), ""},
			{hdr(tar.TypeReg, "opt/old/a", 0o600), "a"},
			{hdr(tar.TypeReg, "opt/gone", 0o644), "will be whited out"},
			{hdr(tar.TypeReg, "bin/su", 0o4755, root), "setuid"},
			{hdr(tar.TypeReg, "bin/ping", 0o755, root, xattr), "has caps"},
			{hdr(tar.TypeLink, "bin/su-link", 0o4755, func(h *tar.Header) { h.Linkname = "bin/su"; root(h) }), ""},
			{hdr(tar.TypeSymlink, "bin/sh", 0o777, func(h *tar.Header) { h.Linkname = "/bin/busybox" }), ""},
			{hdr(tar.TypeChar, "dev/null", 0o666, func(h *tar.Header) { h.Devmajor, h.Devminor = 1, 3; root(h) }), ""},
			{hdr(tar.TypeFifo, "run/fifo", 0o644), ""},
			{hdr(tar.TypeReg, long, 0o644), "long name"},
			{hdr(tar.TypeReg, "data/big", 0o644), big},
			{hdr(tar.TypeDir, "srv/", 0o710, func(h *tar.Header) { h.PAXRecords = map[string]string{"SCHILY.xattr.user.srv": "lower"} }), ""},
			{hdr(tar.TypeDir, "srv/deep/", 0o750), ""},
			{hdr(tar.TypeDir, "srv/other/", 0o700), ""},
			{hdr(tar.TypeDir, "share/", 0o2775), ""},
		},
		{}, // empty layer
		{
			{hdr(tar.TypeReg, "opt/.wh.gone", 0o644), ""},
			{hdr(tar.TypeDir, "opt/old/", 0o755), ""},
			{hdr(tar.TypeReg, "opt/old/.wh..wh..opq", 0o644), ""},
			{hdr(tar.TypeReg, "opt/old/b", 0o644), "b"},
			{hdr(tar.TypeDir, "tmp/", 0o1777, root), ""},
			{hdr(tar.TypeReg, "data/big", 0o640), big[:len(big)/3]},
			{hdr(tar.TypeReg, "srv/deep/f", 0o644), "f"},
			{hdr(tar.TypeSymlink, "alias", 0o777, func(h *tar.Header) { h.Linkname = "srv/other" }), ""},
			{hdr(tar.TypeReg, "alias/g", 0o644), "g"},
			{hdr(tar.TypeDir, "srv/", 0o711, root), ""},
		},
		{
			{hdr(tar.TypeReg, "share/sub/file", 0o644), "under a setgid directory"},
		},
	}
}

func tarOf(t *testing.T, es []entry) []byte {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, e := range es {
		h := e.h
		h.Size = int64(len(e.body))
		if err := w.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, e.body)
	}
	w.Close()
	return b.Bytes()
}

// multiMember gzips p as two members, as parallel compressors (pigz -i, some builders) do.
func multiMember(p []byte) []byte {
	var b bytes.Buffer
	for _, part := range [][]byte{p[:len(p)/2], p[len(p)/2:]} {
		w := gzip.NewWriter(&b)
		w.Write(part)
		w.Close()
	}
	return b.Bytes()
}

func hardImage(t *testing.T) v1.Image {
	img := empty.Image
	for i, es := range hardLayers() {
		z := multiMember(tarOf(t, es))
		if i != 0 {
			var b bytes.Buffer
			w := gzip.NewWriter(&b)
			w.Write(tarOf(t, es))
			w.Close()
			z = b.Bytes()
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(z)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// TestUnpackTreesEqual pulls one image through the daemon's own unpack and through warmd's, each in
// its own namespace of the same containerd, and compares every layer's snapshot tree: types, modes,
// owners, sizes, contents, link targets, devices, xattrs (file capabilities and the overlay's opaque
// marks included) and hard-link structure.
func TestUnpackTreesEqual(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "unpacking layers with devices and xattrs needs root")
	}
	socket := testenv.Containerd(t)
	reg := imagetest.NewRegistry(t, imagetest.Options{})
	ref := reg.Ref("hard/tree:v1")
	reg.Push(t, "hard/tree:v1", hardImage(t))
	trees := map[string][]string{}
	for _, p := range []struct{ ns, path string }{{"eq-daemon", ""}, {"eq-warmd", containerd.PathWarmd}} {
		imagetest.CleanupDaemon(t, socket, p.ns, reg)
		b, err := containerd.New(t.Context(), containerd.Options{Address: socket, Namespace: p.ns, Snapshotter: "overlayfs", Path: p.path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		if p.path != "" && b.Path() != containerd.PathWarmd {
			t.Fatalf("warmd path refused on containerd 2.4 as root: path %s", b.Path())
		}
		r, err := b.Resolve(t.Context(), ref)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Pull(t.Context(), r, nil); err != nil {
			t.Fatalf("%s: %v", p.ns, err)
		}
		if p.path != "" {
			if s := b.Unpacked(); s.Layers != 4 {
				t.Fatalf("warmd unpacked %d layers itself, want 4 (%+v)", s.Layers, s)
			}
		}
		trees[p.ns] = layerTrees(t, b.Client(), p.ns, r)
		_ = b.Release(context.Background(), r.Name, prefetch.OnRemoveRemove)
	}
	d, w := trees["eq-daemon"], trees["eq-warmd"]
	if len(d) != 4 || len(w) != 4 {
		t.Fatalf("layers: daemon %d, warmd %d", len(d), len(w))
	}
	for i := range d {
		if d[i] != w[i] {
			t.Errorf("layer %d differs:\n--- daemon\n%s\n--- warmd\n%s", i, d[i], w[i])
		}
	}
	for _, must := range []string{"opt/gone c 0:0", `trusted.overlay.opaque="y"`, "security.capability=", "mode 4755", "dev/null c 1:3"} {
		if !strings.Contains(strings.Join(w, "\n"), must) {
			t.Errorf("warmd's trees lack %q: the test does not exercise it:\n%s", must, w[0])
		}
	}
	// The implicit parents of layers 2 and 3 took their lower layer's attributes (as the daemon's do).
	for i, musts := range map[int][]string{
		2: {"srv dir mode 711 uid 0 gid 0 user.srv=", "srv/deep dir mode 750 uid 1000", "srv/other dir mode 700 uid 1000"},
		3: {"share dir mode 2775 uid 1000 gid 1000", "share/sub dir mode 755 uid 0 gid 1000"},
	} {
		for _, must := range musts {
			if !strings.Contains(w[i], must) {
				t.Errorf("layer %d of warmd's trees lacks %q: the test does not exercise it:\n%s", i, must, w[i])
			}
		}
	}
}

// layerTrees describes each layer's own directory (the lower dirs of a view of the top snapshot).
func layerTrees(t *testing.T, c *client.Client, ns string, r prefetch.Resolved) []string {
	ctx := namespaced(t, ns)
	img, err := c.GetImage(ctx, r.Name)
	if err != nil {
		t.Fatal(err)
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	chain := identity.ChainID(diffIDs).String()
	sn := c.SnapshotService("overlayfs")
	mounts, err := sn.View(ctx, "eq-view-"+ns, chain)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Remove(ctx, "eq-view-"+ns)
	dirs := containerd.LowerDirs(mounts)
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[len(dirs)-1-i] = describe(t, d) // lowerdir lists the top layer first
	}
	return out
}

// describe lists every entry under dir with what the applier must reproduce.
func describe(t *testing.T, dir string) string {
	var lines []string
	inodes := map[uint64][]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		mode := st.Mode & 0o7777
		line := fmt.Sprintf("%s %s mode %o uid %d gid %d", rel, typeOf(st.Mode), mode, st.Uid, st.Gid)
		if rel == "." {
			line = fmt.Sprintf(". %s mode %o", typeOf(st.Mode), mode)
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			b, _ := os.ReadFile(p)
			s := sha256.Sum256(b)
			line += fmt.Sprintf(" size %d sha %s mtime %d", st.Size, hex.EncodeToString(s[:8]), st.Mtim.Sec)
			if st.Nlink > 1 {
				inodes[st.Ino] = append(inodes[st.Ino], rel)
			}
		case syscall.S_IFLNK:
			l, _ := os.Readlink(p)
			line += " -> " + l
		case syscall.S_IFCHR, syscall.S_IFBLK:
			line = fmt.Sprintf("%s c %d:%d mode %o", rel, unix.Major(st.Rdev), unix.Minor(st.Rdev), mode)
		}
		line += xattrs(p)
		lines = append(lines, line)
		return nil
	})
	for _, names := range inodes {
		sort.Strings(names)
		lines = append(lines, "hardlinks "+strings.Join(names, " = "))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func typeOf(m uint32) string {
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return "dir"
	case syscall.S_IFREG:
		return "file"
	case syscall.S_IFLNK:
		return "symlink"
	case syscall.S_IFIFO:
		return "fifo"
	}
	return "other"
}

func xattrs(p string) string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n == 0 {
		return ""
	}
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	sort.Strings(names)
	var s string
	for _, name := range names {
		v := make([]byte, 256)
		k, _ := unix.Lgetxattr(p, name, v)
		s += fmt.Sprintf(" %s=%q", name, v[:max(k, 0)])
	}
	return s
}

func namespaced(t *testing.T, ns string) context.Context {
	return namespaces.WithNamespace(t.Context(), ns)
}
