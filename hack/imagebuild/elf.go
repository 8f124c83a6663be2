package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// arch is what the image builder knows about one target architecture: how its ELF files look and
// where Debian's multiarch layout puts its libraries (in the sysroot it copies from and in the image).
type arch struct {
	goarch  string
	variant string // OCI platform variant
	machine elf.Machine
	triplet string // Debian multiarch tuple
	qemu    string // qemu-user binary that runs it on another host
}

var arches = map[string]arch{
	"amd64": {goarch: "amd64", machine: elf.EM_X86_64, triplet: "x86_64-linux-gnu", qemu: "qemu-x86_64-static"},
	"arm64": {goarch: "arm64", variant: "v8", machine: elf.EM_AARCH64, triplet: "aarch64-linux-gnu", qemu: "qemu-aarch64-static"},
}

// libDir is where the image keeps shared libraries: the first directory of glibc's built-in search
// path on Debian, so the loader finds them without an ld.so.cache.
func (a arch) libDir() string { return "/lib/" + a.triplet }

// searchDirs are the sysroot directories a DT_NEEDED name is looked up in, in order: Debian's
// multiarch dirs, then the plain lib dirs a cross sysroot (/usr/<triplet>/lib) uses.
func (a arch) searchDirs() []string {
	return []string{"/lib/" + a.triplet, "/usr/lib/" + a.triplet, "/lib", "/usr/lib", "/lib64", "/usr/lib64"}
}

// sysroot is a directory tree holding an architecture's runtime libraries: "/" for the build
// machine's own, or an extracted Debian package tree for another architecture.
type sysroot struct {
	dir string
}

// resolve follows symlinks of p (an absolute path inside the sysroot) within the sysroot, so an
// absolute link target means the sysroot's path, not the build machine's. It returns the host path
// of the final regular file.
func (s sysroot) resolve(p string) (string, error) {
	cur := path.Clean("/" + p)
	for hops := 0; hops < 40; hops++ {
		// Resolve each component so a symlinked directory (/lib -> usr/lib) stays inside the sysroot.
		parts := strings.Split(strings.TrimPrefix(cur, "/"), "/")
		done := "/"
		redirected := false
		for i, part := range parts {
			next := path.Join(done, part)
			host := filepath.Join(s.dir, filepath.FromSlash(next))
			fi, err := os.Lstat(host)
			if err != nil {
				return "", err
			}
			if fi.Mode()&fs.ModeSymlink == 0 {
				done = next
				continue
			}
			target, err := os.Readlink(host)
			if err != nil {
				return "", err
			}
			if !path.IsAbs(target) {
				target = path.Join(done, target)
			}
			cur = path.Join(append([]string{target}, parts[i+1:]...)...)
			redirected = true
			break
		}
		if !redirected {
			host := filepath.Join(s.dir, filepath.FromSlash(done))
			fi, err := os.Stat(host)
			if err != nil {
				return "", err
			}
			if !fi.Mode().IsRegular() {
				return "", fmt.Errorf("%s is not a regular file", p)
			}
			return host, nil
		}
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", p)
}

// lib is one file the binary needs at run time, with where it goes in the image.
type lib struct {
	name      string // DT_NEEDED name or the interpreter's path
	host      string // file on the build machine
	sysPath   string // path inside the sysroot it was found at (for package lookup)
	imagePath string
}

// elfDeps returns the dynamic loader (PT_INTERP) and every shared library the binary needs,
// transitively (DT_NEEDED of each library too), found in sr. A static binary needs none. Every file
// must be an ELF of a's machine: a library of the wrong architecture would fail only at run time.
func elfDeps(binary string, a arch, sr sysroot) ([]lib, error) {
	f, err := elf.Open(binary)
	if err != nil {
		return nil, fmt.Errorf("read ELF %s: %w", binary, err)
	}
	defer f.Close()
	if f.Machine != a.machine {
		return nil, fmt.Errorf("%s is built for %s, not %s (GOARCH=%s): rebuild it for this platform", binary, f.Machine, a.machine, a.goarch)
	}
	interp, err := interpreter(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", binary, err)
	}
	if interp == "" {
		return nil, nil
	}
	var out []lib
	host, err := sr.resolve(interp)
	if err != nil {
		return nil, fmt.Errorf("%s needs the loader %s, not found in sysroot %s: %w (install the target's libc6 there)", binary, interp, sr.dir, err)
	}
	if err := checkMachine(host, a); err != nil {
		return nil, err
	}
	out = append(out, lib{name: interp, host: host, sysPath: interp, imagePath: interp})
	loaderName := path.Base(interp)

	seen := map[string]bool{loaderName: true}
	queue, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("%s: DT_NEEDED: %w", binary, err)
	}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] {
			continue // also skips the loader: it is loaded already and matched by its soname
		}
		seen[name] = true
		if strings.Contains(name, "/") {
			return nil, fmt.Errorf("%s: DT_NEEDED %q is a path, not a library name; link it by name", binary, name)
		}
		l, err := findLib(name, a, sr)
		if err != nil {
			return nil, fmt.Errorf("%s (needed by %s): %w", name, binary, err)
		}
		out = append(out, l)
		lf, err := elf.Open(l.host)
		if err != nil {
			return nil, fmt.Errorf("read ELF %s: %w", l.host, err)
		}
		more, err := lf.ImportedLibraries()
		lf.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: DT_NEEDED: %w", l.host, err)
		}
		queue = append(queue, more...)
	}
	return out, nil
}

func findLib(name string, a arch, sr sysroot) (lib, error) {
	var tried []string
	for _, dir := range a.searchDirs() {
		p := path.Join(dir, name)
		host, err := sr.resolve(p)
		if errors.Is(err, fs.ErrNotExist) {
			tried = append(tried, p)
			continue
		}
		if err != nil {
			return lib{}, err
		}
		// A multilib sysroot may hold the same name for another machine: skip those.
		if err := checkMachine(host, a); err != nil {
			tried = append(tried, p+" (wrong machine)")
			continue
		}
		return lib{name: name, host: host, sysPath: p, imagePath: path.Join(a.libDir(), name)}, nil
	}
	return lib{}, fmt.Errorf("not found in sysroot %s (tried %s)", sr.dir, strings.Join(tried, ", "))
}

func interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", fmt.Errorf("read PT_INTERP: %w", err)
		}
		s := strings.TrimRight(string(b), "\x00")
		if !path.IsAbs(s) {
			return "", fmt.Errorf("PT_INTERP %q is not an absolute path", s)
		}
		return s, nil
	}
	return "", nil
}

func checkMachine(file string, a arch) error {
	f, err := elf.Open(file)
	if err != nil {
		return fmt.Errorf("read ELF %s: %w", file, err)
	}
	defer f.Close()
	if f.Machine != a.machine {
		return fmt.Errorf("%s is %s, want %s", file, f.Machine, a.machine)
	}
	return nil
}
