// Command prewarm is the measuring half of `make bench-prewarm` (scripts/bench/prewarm.sh): it lays
// out a published model in warmd's weights cache layout (blobs written with O_DIRECT, as the weights
// engine publishes them, and snapshot links into blobs/), then per round times a start from the pod's
// binding to the model fully read: the trigger, a delay standing for the container start and vLLM's
// imports (-start-delay), then a loader-like sequential read of every file. Cold: only the delay and
// the read (this model's pages dropped with POSIX_FADV_DONTNEED first). Warm: warmd's pre-warm
// (pkg/prewarm.Warm with the daemon's default budget) starts at the trigger, as the daemon starts it
// when it sees the pod bound, and the loader starts after the same delay whether or not the pre-warm
// is done (they then share the disk), so the pre-warm's own time is charged to the warm start
// wherever it does not overlap the delay. Which comes first alternates per round. mincore(2) counts the resident pages after each drop and each pre-warm, so a round whose
// "cold" read was not cold (or whose pre-warm did not load the cache) is visible, not averaged in.
//
// Output: one line per round on stderr, then the medians as `prewarm: cold <C>s, warm <W>s,
// speedup <C/W>` on stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/hfcache"
	"warmd.io/warmd/pkg/prewarm"
)

const (
	modelName = "bench/prewarm"
	revision  = "main"
	mib       = 1 << 20
	gib       = 1 << 30
)

func main() {
	dir := flag.String("dir", "", "data dir to lay the model out in (its weights/ is the cache root)")
	shards := flag.Int("shards", 4, "safetensors shards")
	shard := flag.Int64("shard-bytes", gib, "bytes per shard (a multiple of 1 MiB)")
	rounds := flag.Int("rounds", 5, "rounds (>= 5)")
	maxBytes := flag.Int64("max-bytes", 64*gib, "prewarm.maxBytes (the daemon's default 64Gi)")
	pct := flag.Int("mem-percent", 50, "prewarm.memAvailablePercent (the daemon's default 50)")
	delay := flag.Duration("start-delay", 23*time.Second, "pod bound → the loader's first read (container start and imports; the seed logs' shortest imports 23 s)")
	flag.Parse()
	startDelay = *delay
	if *dir == "" || *rounds < 5 || *shards < 1 || *shard < mib || *shard%mib != 0 {
		fmt.Fprintln(os.Stderr, "usage: prewarm -dir DATADIR [-shards N] [-shard-bytes B (MiB multiple)] [-rounds R>=5]")
		os.Exit(2)
	}
	if err := run(*dir, *shards, *shard, *rounds, *maxBytes, *pct); err != nil {
		fmt.Fprintln(os.Stderr, "bench-prewarm:", err)
		os.Exit(1)
	}
}

// startDelay is the time from the pod's binding (the pre-warm's trigger) to vLLM's first weight read.
var startDelay time.Duration

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench-prewarm: "+format+"\n", args...) }

func run(dataDir string, shards int, shard int64, rounds int, maxBytes int64, pct int) error {
	cacheRoot := filepath.Join(dataDir, "weights")
	snap, err := hfcache.SnapshotDir(modelName, revision)
	if err != nil {
		return err
	}
	snapDir := filepath.Join(cacheRoot, snap.String())
	names, err := layout(snapDir, shards, shard)
	if err != nil {
		return err
	}
	var blobs []string // the real files, for DONTNEED and mincore
	var total int64
	for _, n := range names {
		b, err := filepath.EvalSymlinks(filepath.Join(snapDir, n))
		if err != nil {
			return err
		}
		fi, err := os.Stat(b)
		if err != nil {
			return err
		}
		blobs, total = append(blobs, b), total+fi.Size()
	}
	root, err := fsroot.Open(cacheRoot)
	if err != nil {
		return err
	}
	defer root.Close()
	avail, err := prewarm.MemAvailable(prewarm.MemInfo)
	if err != nil {
		return err
	}
	budget := prewarm.Budget(maxBytes, pct, avail, 0)
	logf("model %s: %d files, %.2f GiB in %s; MemAvailable %.1f GiB, pre-warm budget %.2f GiB",
		modelName, len(names), float64(total)/gib, snapDir, float64(avail)/gib, float64(budget)/gib)
	if budget < total {
		logf("warning: the budget is below the model's size; the warm read is only partly warm")
	}

	var colds, warms, prewarms []float64
	for r := 1; r <= rounds; r++ {
		var cold, warm, pw float64
		var resCold, resWarm float64
		measureCold := func() error {
			if err := drop(blobs); err != nil {
				return err
			}
			resCold = resident(blobs)
			t0 := time.Now() // the pod is bound
			time.Sleep(startDelay)
			if _, err := load(snapDir, names, total); err != nil {
				return err
			}
			cold = time.Since(t0).Seconds()
			return nil
		}
		measureWarm := func() error {
			if err := drop(blobs); err != nil {
				return err
			}
			t0 := time.Now() // the pod is bound: the daemon starts the pre-warm
			type outcome struct {
				res  prewarm.Result
				err  error
				secs float64
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := prewarm.Warm(context.Background(), root, snap, budget, nil)
				done <- outcome{res, err, time.Since(t0).Seconds()}
			}()
			time.Sleep(startDelay)
			resWarm = resident(blobs) // what the loader finds when it starts
			if _, err := load(snapDir, names, total); err != nil {
				return err
			}
			warm = time.Since(t0).Seconds()
			o := <-done
			if o.err != nil {
				return fmt.Errorf("pre-warm: %w", o.err)
			}
			pw = o.secs
			if o.res.Bytes != min(budget, total) {
				return fmt.Errorf("pre-warm read %d bytes, want %d", o.res.Bytes, min(budget, total))
			}
			return nil
		}
		first, second, order := measureCold, measureWarm, "cold first"
		if r%2 == 0 {
			first, second, order = measureWarm, measureCold, "warm first"
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
		d := startDelay.Seconds()
		logf("round %d (%s): bound→read cold %.2fs (read %.2fs, %.1f%% resident before), warm %.2fs (read %.2fs, %.1f%% resident when the loader started), pre-warm done %.2fs after the trigger",
			r, order, cold, cold-d, resCold*100, warm, warm-d, resWarm*100, pw)
		colds, warms, prewarms = append(colds, cold), append(warms, warm), append(prewarms, pw)
	}
	if err := drop(blobs); err != nil { // leave no 4 GiB of ours in a shared machine's cache
		return err
	}
	c, w, p := median(colds), median(warms), median(prewarms)
	logf("medians over %d rounds, pod bound → model read, %.0fs start delay included in both: cold %.2fs, warm %.2fs (pre-warm included; it finished %.2fs after the trigger); the reads alone: cold %.2fs, warm %.2fs",
		rounds, startDelay.Seconds(), c, w, p, c-startDelay.Seconds(), w-startDelay.Seconds())
	fmt.Printf("prewarm: cold %.2fs, warm %.2fs, speedup %.2f\n", c, w, c/w)
	return nil
}

// layout writes the model once (kept between runs of the same size): shards of incompressible
// bytes written with O_DIRECT into blobs/, a small config.json, and snapshot links as warmd
// publishes them. It returns the snapshot's file names in order.
func layout(snapDir string, shards int, shard int64) ([]string, error) {
	md := filepath.Dir(filepath.Dir(snapDir))
	var names []string
	for i := range shards {
		names = append(names, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, shards))
	}
	names = append(names, "config.json")
	for _, d := range []string{filepath.Join(md, "blobs"), snapDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for i, n := range names {
		blob := filepath.Join(md, "blobs", fmt.Sprintf("blob-%d", i))
		size := shard
		if n == "config.json" {
			size = 4096
		}
		if fi, err := os.Stat(blob); err != nil || fi.Size() != size {
			logf("writing %s (%d bytes, O_DIRECT)", blob, size)
			if err := writeDirect(blob, size, uint64(i)); err != nil {
				return nil, err
			}
		}
		link := filepath.Join(snapDir, n)
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if err := os.Symlink(fmt.Sprintf("../../blobs/blob-%d", i), link); err != nil {
			return nil, err
		}
	}
	return names, nil
}

func writeDirect(path string, size int64, seed uint64) error {
	buf, err := unix.Mmap(-1, 0, 16*mib, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE) // aligned
	if err != nil {
		return err
	}
	defer unix.Munmap(buf)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_DIRECT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("open %s with O_DIRECT: %w", path, err)
	}
	defer unix.Close(fd)
	rng := rand.NewChaCha8([32]byte{byte(seed), 'w', 'a', 'r', 'm', 'd'})
	for off := int64(0); off < size; {
		n := min(int64(len(buf)), size-off)
		_, _ = rng.Read(buf[:n])
		if _, err := unix.Pwrite(fd, buf[:n], off); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		off += n
	}
	return unix.Fsync(fd)
}

// load is the loader: every file of the snapshot opened by its name (links followed, as vLLM does)
// and read start to end with 16 MiB reads. It returns the seconds taken.
func load(snapDir string, names []string, total int64) (float64, error) {
	buf := make([]byte, 16*mib)
	t0 := time.Now()
	var got int64
	for _, n := range names {
		f, err := os.Open(filepath.Join(snapDir, n))
		if err != nil {
			return 0, err
		}
		k, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
		f.Close()
		if err != nil {
			return 0, err
		}
		got += k
	}
	secs := time.Since(t0).Seconds()
	if got != total {
		return 0, fmt.Errorf("loader read %d bytes, want %d", got, total)
	}
	return secs, nil
}

// drop evicts only these files' pages (never drop_caches: the machine is shared).
func drop(files []string) error {
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
		if err != nil {
			return fmt.Errorf("fadvise DONTNEED %s: %w", p, err)
		}
	}
	return nil
}

// resident is the share of the files' pages in the page cache (mincore on a mapping).
func resident(files []string) float64 {
	var in, all int
	page := os.Getpagesize()
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return -1
		}
		fi, _ := f.Stat()
		m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
		f.Close()
		if err != nil {
			return -1
		}
		vec := make([]byte, (len(m)+page-1)/page)
		_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
		unix.Munmap(m)
		if errno != 0 {
			return -1
		}
		for _, v := range vec {
			in += int(v & 1)
		}
		all += len(vec)
	}
	return float64(in) / float64(all)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
