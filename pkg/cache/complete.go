package cache

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/pkg/cache/bundle"
)

// FileID identifies a file by device and inode, as /proc/<pid>/fd links resolve to.
type FileID struct{ Dev, Ino uint64 }

// fileID returns the id of an os.FileInfo from a stat.
func fileID(fi os.FileInfo) (FileID, bool) {
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t: // os.Stat
		return FileID{Dev: uint64(st.Dev), Ino: st.Ino}, true
	case *unix.Stat_t: // fsroot
		return FileID{Dev: st.Dev, Ino: st.Ino}, true
	}
	return FileID{}, false
}

// ProcOpenWriters lists every file some visible process holds open for writing, from
// /proc/<pid>/fd and the access mode in /proc/<pid>/fdinfo. The DaemonSet runs with hostPID so pods'
// compilers are visible; where a process is not visible the quiet period and the size-stability
// check still apply.
func ProcOpenWriters() (map[FileID]bool, error) {
	pids, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[FileID]bool{}
	for _, p := range pids {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			if !writeMode(filepath.Join("/proc", p.Name(), "fdinfo", fd.Name())) {
				continue
			}
			fi, err := os.Stat(filepath.Join(fdDir, fd.Name()))
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if id, ok := fileID(fi); ok {
				out[id] = true
			}
		}
	}
	return out, nil
}

// writeMode reports whether an fdinfo's flags open the file for writing (O_WRONLY or O_RDWR).
func writeMode(fdinfo string) bool {
	f, err := os.Open(fdinfo)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&syscall.O_ACCMODE != syscall.O_RDONLY
		}
	}
	return false
}

// ignored reports paths that are never complete cache entries: our own temp files, lock files,
// temp dirs (Triton writes <key>/tmp.pid_<pid>_<n>/ then renames, FlashInfer keeps FileLocks in
// cached_ops/tmp/), logs and editor/NFS debris.
func ignored(rel string) bool {
	if bundle.IsTemp(rel) {
		return true
	}
	for _, el := range strings.Split(rel, "/") {
		switch {
		case el == "tmp" || el == "locks" || el == "__pycache__" || el == ".warmd":
			return true
		case strings.HasPrefix(el, "tmp.") || strings.HasPrefix(el, "tmp_") || strings.HasPrefix(el, ".nfs"):
			return true
		}
	}
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	for _, suf := range []string{".lock", ".tmp", ".log", ".swp", ".part", "~"} {
		if strings.HasSuffix(base, suf) {
			return true
		}
	}
	return strings.Contains(base, ".tmp.")
}

// versionsOf reads the versions a component's paths reveal: FlashInfer's version and arch dirs
// (.cache/flashinfer/<version>/<arch>/cached_ops/…, v0.4.1+) and vLLM's cache hash dirs
// (torch_compile_cache/<hash>/… and torch_compile_cache/torch_aot_compile/<hash>/…). The hash covers
// the vLLM version, config, env and torch/Triton versions, so it is what a miss is explained by.
func versionsOf(component string, paths []string) map[string][]string {
	seen := map[string]map[string]bool{}
	add := func(k, v string) {
		if seen[k] == nil {
			seen[k] = map[string]bool{}
		}
		seen[k][v] = true
	}
	for _, p := range paths {
		el := strings.Split(p, "/")
		switch component {
		case ComponentFlashInfer:
			for i := 0; i+3 < len(el); i++ {
				if el[i] == "flashinfer" && el[i+3] == "cached_ops" {
					add("flashinfer", el[i+1])
					add("flashinfer-arch", el[i+2])
				}
				if el[i] == "flashinfer" && el[i+2] == "cached_ops" {
					add("flashinfer-arch", el[i+1]) // v0.2.x: no version dir
				}
			}
		case ComponentVLLM:
			for i := 0; i+2 < len(el); i++ {
				if el[i] != "torch_compile_cache" {
					continue
				}
				if el[i+1] == "torch_aot_compile" && i+3 < len(el) {
					add("vllm-aot-hash", el[i+2])
				} else if el[i+1] != "torch_aot_compile" {
					add("vllm-cache-hash", el[i+1])
				}
			}
		}
	}
	if len(seen) == 0 {
		return nil
	}
	out := map[string][]string{}
	for k, vs := range seen {
		for v := range vs {
			out[k] = append(out[k], v)
		}
		sortStrings(out[k])
	}
	return out
}
