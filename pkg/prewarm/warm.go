package prewarm

import (
	"context"
	"fmt"
	"io"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/hfcache"
)

// chunk is one read. 8 MiB keeps the syscall count low (a 16 GiB model is 2048 reads) and the disk's
// queue busy together with the kernel's sequential readahead, without holding much memory.
const chunk = 8 << 20

// Result is what one pre-warm read.
type Result struct {
	// Files is the number of distinct files of the snapshot; Read the number touched (whole or in part).
	Files, Read int
	// Bytes is what was read into the page cache; Total the snapshot's size.
	Bytes, Total int64
	// Budget is the cap the run was given; BudgetHit says it stopped there before the last file.
	Budget    int64
	BudgetHit bool
}

// Warm reads the files of the snapshot at snap (below root, the weights cache root) sequentially in
// name order until budget bytes are read, ctx ends, or every file was read. Name order is the order
// vLLM's loader walks safetensors shards, so a budget that ends early leaves the loader's first files
// warm. onBytes (may be nil) is told of each chunk read. A cancelled run returns what it read with
// ctx's error.
func Warm(ctx context.Context, root *fsroot.Root, snap fsroot.Path, budget int64, onBytes func(int64)) (Result, error) {
	res := Result{Budget: budget}
	files, err := hfcache.List(root, snap)
	if err != nil {
		return res, err
	}
	res.Files = len(files)
	for _, f := range files {
		res.Total += f.Size
	}
	if onBytes == nil {
		onBytes = func(int64) {}
	}
	buf := make([]byte, chunk)
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		left := budget - res.Bytes
		if left <= 0 {
			res.BudgetHit = true
			break
		}
		n, err := readFile(ctx, root, f.Path, min(left, f.Size), buf, onBytes)
		res.Bytes += n
		if n > 0 {
			res.Read++
		}
		if err != nil {
			return res, err
		}
		if n < f.Size && res.Bytes >= budget {
			res.BudgetHit = true
			break
		}
	}
	return res, nil
}

// readFile reads up to limit bytes of p from its start. POSIX_FADV_SEQUENTIAL doubles the kernel's
// readahead window for the file, so the disk works ahead of the copies; where the budget ends inside
// a file, that window (2 x read_ahead_kb) is what may be cached past it.
func readFile(ctx context.Context, root *fsroot.Root, p fsroot.Path, limit int64, buf []byte, onBytes func(int64)) (int64, error) {
	fh, err := root.Open(p)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	_ = unix.Fadvise(int(fh.Fd()), 0, limit, unix.FADV_SEQUENTIAL) // advice only; reading works without it
	var done int64
	for done < limit {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		n, err := fh.ReadAt(buf[:min(int64(len(buf)), limit-done)], done)
		done += int64(n)
		onBytes(int64(n))
		if err == io.EOF {
			return done, nil // the file shrank: a blob being replaced; what is left is warm
		}
		if err != nil {
			return done, fmt.Errorf("read %s: %w", root.Name(p), err)
		}
	}
	return done, nil
}
