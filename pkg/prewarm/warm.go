package prewarm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/model"
)

// chunk is one read. 8 MiB keeps the syscall count low (a 16 GiB model is 2048 reads) and the disk's
// queue busy together with the kernel's sequential readahead, without holding much memory.
const chunk = 8 << 20

// ErrNotPublished: the model's snapshot is not in the cache (not fetched yet, or evicted).
var ErrNotPublished = errors.New("no published snapshot")

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

// SnapshotDir is the published snapshot of model at revision below the weights cache root
// (models--org--name/snapshots/<rev>, the Hugging Face cache layout warmd publishes).
func SnapshotDir(name, revision string) (fsroot.Path, error) {
	dir, err := model.DirName(name)
	if err != nil {
		return fsroot.Path{}, err
	}
	if err := model.ValidateRevision(revision); err != nil {
		return fsroot.Path{}, fmt.Errorf("model %s: %w", name, err)
	}
	return fsroot.Join(dir, "snapshots", revision)
}

// Warm reads the files of the snapshot at snap (below root, the weights cache root) sequentially in
// name order until budget bytes are read, ctx ends, or every file was read. Name order is the order
// vLLM's loader walks safetensors shards, so a budget that ends early leaves the loader's first files
// warm. onBytes (may be nil) is told of each chunk read. A cancelled run returns what it read with
// ctx's error.
func Warm(ctx context.Context, root *fsroot.Root, snap fsroot.Path, budget int64, onBytes func(int64)) (Result, error) {
	res := Result{Budget: budget}
	files, err := List(root, snap)
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

// File is one distinct file of a snapshot: where its bytes are (a blob) and its size.
type File struct {
	// Name is the file's name in the snapshot; Path where its bytes are below the cache root.
	Name string
	Path fsroot.Path
	Size int64
}

// List returns the snapshot's files in name order, each resolved to the blob it links to (warmd
// publishes snapshot entries as relative links into the model's blobs/ dir, as Hugging Face does);
// a regular file in the snapshot is taken as it is. A link that leads anywhere but the model's own
// blobs/ (another model, staging, outside the root) is refused, and so is any link in blobs/. Two
// names for one blob are read once.
func List(root *fsroot.Root, snap fsroot.Path) ([]File, error) {
	if snap.Depth() != 3 || snap.Components()[1] != "snapshots" {
		return nil, fmt.Errorf("prewarm: %s is not a snapshot dir (models--org--name/snapshots/<rev>)", root.Name(snap))
	}
	blobs := snap.Dir().Dir().Join(fsroot.MustPath("blobs"))
	fi, err := root.Lstat(snap)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", root.Name(snap), ErrNotPublished)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s: %w (not a directory)", root.Name(snap), ErrNotPublished)
	}
	var out []File
	seen := map[string]bool{}
	var walk func(dir fsroot.Path, rel string) error
	walk = func(dir fsroot.Path, rel string) error {
		ents, err := root.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p, err := dir.Child(e.Name())
			if err != nil {
				return fmt.Errorf("prewarm: snapshot entry: %w", err)
			}
			name := strings.TrimPrefix(rel+"/"+e.Name(), "/")
			switch {
			case e.IsDir():
				if err := walk(p, name); err != nil {
					return err
				}
				continue
			case e.Type()&fs.ModeSymlink != 0:
				target, err := root.Readlink(p)
				if err != nil {
					return err
				}
				blob, err := resolve(p, target)
				if err != nil || blob.Dir() != blobs {
					return fmt.Errorf("prewarm: %s links to %s, not into %s: refused", root.Name(p), fsroot.Quote(target), root.Name(blobs))
				}
				p = blob
			case !e.Type().IsRegular():
				continue
			}
			fi, err := root.Lstat(p)
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				return fmt.Errorf("prewarm: %s is not a regular file: %w", root.Name(p), fsroot.ErrNotRegular)
			}
			if seen[p.String()] {
				continue
			}
			seen[p.String()] = true
			out = append(out, File{Name: name, Path: p, Size: fi.Size()})
		}
		return nil
	}
	if err := walk(snap, ""); err != nil {
		return nil, err
	}
	return out, nil
}

// resolve applies a relative link target to the link's directory lexically, never leaving the root.
func resolve(link fsroot.Path, target string) (fsroot.Path, error) {
	if strings.HasPrefix(target, "/") {
		return fsroot.Path{}, errors.New("absolute link")
	}
	comps := link.Dir().Components()
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(comps) == 0 {
				return fsroot.Path{}, errors.New("leaves the root")
			}
			comps = comps[:len(comps)-1]
		default:
			comps = append(comps, c)
		}
	}
	return fsroot.Join(comps...)
}

// Blob returns where the bytes of one file of the snapshot at snap are: the blob its link leads to
// (only into the model's own blobs/, as List requires) or the regular file itself. The peer server
// reads published files through it, so it serves exactly what List would pre-warm.
func Blob(root *fsroot.Root, snap, name fsroot.Path) (File, error) {
	if snap.Depth() != 3 || snap.Components()[1] != "snapshots" || name.IsRoot() {
		return File{}, fmt.Errorf("prewarm: %s is not a file of a snapshot dir", root.Name(snap.Join(name)))
	}
	blobs := snap.Dir().Dir().Join(fsroot.MustPath("blobs"))
	p := snap.Join(name)
	fi, err := root.Lstat(p)
	if err != nil {
		return File{}, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := root.Readlink(p)
		if err != nil {
			return File{}, err
		}
		blob, err := resolve(p, target)
		if err != nil || blob.Dir() != blobs {
			return File{}, fmt.Errorf("prewarm: %s links to %s, not into %s: refused", root.Name(p), fsroot.Quote(target), root.Name(blobs))
		}
		p = blob
		if fi, err = root.Lstat(p); err != nil {
			return File{}, err
		}
	}
	if !fi.Mode().IsRegular() {
		return File{}, fmt.Errorf("prewarm: %s is not a regular file: %w", root.Name(p), fsroot.ErrNotRegular)
	}
	return File{Name: name.String(), Path: p, Size: fi.Size()}, nil
}
