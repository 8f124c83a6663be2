package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
)

// Users of the image: root for the node daemon (its DaemonSet says runAsUser: 0) and the
// distroless-style nonroot user (65532) the image defaults to, which the extender runs as.
const (
	nonrootUID = 65532
	binPath    = "/usr/local/bin/warmd"
)

// entry is one file, directory or symlink of a layer.
type entry struct {
	path     string // absolute, clean
	mode     int64  // permission bits (and sticky)
	dir      bool
	linkname string // symlink target when set
	uid, gid int
	data     []byte
	src      string // host file to copy when data is nil and it is a regular file
}

// tree collects entries and adds the parent directories each needs.
type tree struct {
	entries map[string]*entry
}

func newTree() *tree { return &tree{entries: map[string]*entry{}} }

func (t *tree) dir(p string, mode int64, uid int) {
	p = path.Clean(p)
	if p == "/" {
		return
	}
	t.dir(path.Dir(p), 0o755, 0)
	if _, ok := t.entries[p]; !ok {
		t.entries[p] = &entry{path: p, mode: mode, dir: true, uid: uid, gid: uid}
	}
}

func (t *tree) file(p string, mode int64, data []byte) {
	t.dir(path.Dir(p), 0o755, 0)
	t.entries[p] = &entry{path: p, mode: mode, data: data}
}

func (t *tree) copyFile(p string, mode int64, src string) {
	t.dir(path.Dir(p), 0o755, 0)
	t.entries[p] = &entry{path: p, mode: mode, src: src}
}

// baseTree is what every warmd image holds besides the binary: users, CA certificates, the loader
// and libraries the binary needs, package metadata for scanners, and the directories a read-only
// root filesystem still needs (/tmp is mounted over by the DaemonSet; /home/nonroot for the user).
func baseTree(a arch, libs []lib, db *dpkgDB, sr sysroot, caBundle string) (*tree, error) {
	t := newTree()
	t.file("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\n"+
		fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonrootUID, nonrootUID)))
	t.file("/etc/group", 0o644, []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonrootUID)))
	// Go's resolver and glibc both read this; without it glibc's defaults differ between versions.
	t.file("/etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nhosts: files dns\n"))
	t.copyFile("/etc/ssl/certs/ca-certificates.crt", 0o644, caBundle)
	t.dir("/tmp", 0o1777, 0)
	t.dir("/root", 0o700, 0)
	t.dir("/home/nonroot", 0o700, nonrootUID)
	// The NVIDIA container toolkit mounts libnvidia-ml.so.1 into the multiarch lib dir; go-nvml
	// dlopens it from there (a CPU node simply has none: warmd's null GPU path).
	t.dir(a.libDir(), 0o755, 0)
	t.dir("/usr/lib/"+a.triplet, 0o755, 0)

	pkgs := map[string]bool{}
	for _, l := range libs {
		t.copyFile(l.imagePath, 0o755, l.host)
		if pkg := db.pkgOf(l.sysPath); pkg != "" {
			pkgs[pkg] = true
		} else if hostPath, err := sr.resolve(l.sysPath); err == nil {
			// The sysroot may list the file under its resolved name (/lib64/ld… → /lib/<triplet>/ld…).
			rel := strings.TrimPrefix(hostPath, strings.TrimSuffix(sr.dir, "/"))
			if pkg := db.pkgOf(rel); pkg != "" {
				pkgs[pkg] = true
			}
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(pkgs)) {
		st, name := db.stanza(pkg)
		if st == nil {
			continue
		}
		t.file("/var/lib/dpkg/status.d/"+name, 0o644, st)
		if cp, err := sr.resolve("/usr/share/doc/" + name + "/copyright"); err == nil {
			t.copyFile("/usr/share/doc/"+name+"/copyright", 0o644, cp)
		}
	}
	return t, nil
}

// layer writes the tree as a gzip-compressed tar: entries sorted by path, every timestamp set to
// mtime and owners numeric, so the same inputs give the same bytes (and the same digest) on every
// machine. klauspost's gzip is deterministic for a given level and version.
func (t *tree) layer(mtime time.Time) ([]byte, error) {
	paths := slices.Sorted(maps.Keys(t.entries))
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, p := range paths {
		e := t.entries[p]
		h := &tar.Header{
			Name: strings.TrimPrefix(p, "/"), Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: mtime.Truncate(time.Second),
		}
		var body io.Reader
		switch {
		case e.dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case e.linkname != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.linkname
		default:
			h.Typeflag = tar.TypeReg
			data := e.data
			if data == nil {
				if data, err = os.ReadFile(e.src); err != nil {
					return nil, fmt.Errorf("layer file %s: %w", p, err)
				}
			}
			h.Size = int64(len(data))
			body = bytes.NewReader(data)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", p, err)
		}
		if body != nil {
			if _, err := io.Copy(tw, body); err != nil {
				return nil, fmt.Errorf("tar %s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
