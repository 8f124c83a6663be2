// Package hfcache is the Hugging Face hub cache layout, spelled once: a model's dir
// (models--org--name), its blobs/, refs/<rev> and snapshots/<rev>/ of relative links into blobs/,
// and the reading of a published snapshot (List, Blob) that refuses any link leading elsewhere. The
// weights part publishes into it, the pre-warm reads it, the peer server serves from it and the file
// source reads a snapshot dir given to it, so all four agree on one tree: the one vLLM,
// transformers and huggingface_hub read (HF_HUB_CACHE). Every path is an fsroot.Path below the cache
// root, so nothing here can name a place outside it.
package hfcache

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/model"
)

// ErrNotPublished: the model's snapshot is not in the cache (not fetched yet, or evicted).
var ErrNotPublished = errors.New("no published snapshot")

// The names inside a model's dir.
const (
	BlobsDir     = "blobs"
	RefsDir      = "refs"
	SnapshotsDir = "snapshots"
	// DirPrefix starts every model dir's name (model.DirName).
	DirPrefix = "models--"
)

// ModelDir is the dir of model below the cache root (models--org--name).
func ModelDir(name string) (fsroot.Path, error) {
	dir, err := model.DirName(name)
	if err != nil {
		return fsroot.Path{}, err
	}
	return fsroot.ParsePath(dir)
}

// Blobs is the model dir's blobs/, where the bytes of every published file are.
func Blobs(dir fsroot.Path) fsroot.Path { return dir.Join(fsroot.MustPath(BlobsDir)) }

// Snapshots is the model dir's snapshots/, one dir of links per published revision.
func Snapshots(dir fsroot.Path) fsroot.Path { return dir.Join(fsroot.MustPath(SnapshotsDir)) }

// Snapshot is the model dir's snapshots/<rev>; rev is one path component.
func Snapshot(dir, rev fsroot.Path) fsroot.Path { return Snapshots(dir).Join(rev) }

// Ref is the model dir's refs/<rev>, which names the commit a branch or tag resolved to.
func Ref(dir, rev fsroot.Path) fsroot.Path { return dir.Join(fsroot.MustPath(RefsDir)).Join(rev) }

// IsSnapshotDir reports whether a host path (slash-separated, cleaned) is a snapshot dir of a model
// dir, …/models--org--name/snapshots/<rev>, and returns the model dir's path and the snapshot's path
// relative to it (snapshots/<rev>).
func IsSnapshotDir(p string) (modelDir, rel string, ok bool) {
	rev := p[strings.LastIndex(p, "/")+1:]
	snaps := strings.TrimSuffix(p, "/"+rev)
	if snaps == p || !strings.HasSuffix(snaps, "/"+SnapshotsDir) || rev == "" {
		return "", "", false
	}
	modelDir = strings.TrimSuffix(snaps, "/"+SnapshotsDir)
	if !strings.HasPrefix(modelDir[strings.LastIndex(modelDir, "/")+1:], DirPrefix) {
		return "", "", false
	}
	return modelDir, SnapshotsDir + "/" + rev, true
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
	return fsroot.Join(dir, SnapshotsDir, revision)
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
	if snap.Depth() != 3 || snap.Components()[1] != SnapshotsDir {
		return nil, fmt.Errorf("hfcache: %s is not a snapshot dir (models--org--name/snapshots/<rev>)", root.Name(snap))
	}
	blobs := Blobs(snap.Dir().Dir())
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
				return fmt.Errorf("hfcache: snapshot entry: %w", err)
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
					return fmt.Errorf("hfcache: %s links to %s, not into %s: refused", root.Name(p), fsroot.Quote(target), root.Name(blobs))
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
				return fmt.Errorf("hfcache: %s is not a regular file: %w", root.Name(p), fsroot.ErrNotRegular)
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
	if snap.Depth() != 3 || snap.Components()[1] != SnapshotsDir || name.IsRoot() {
		return File{}, fmt.Errorf("hfcache: %s is not a file of a snapshot dir", root.Name(snap.Join(name)))
	}
	blobs := Blobs(snap.Dir().Dir())
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
			return File{}, fmt.Errorf("hfcache: %s links to %s, not into %s: refused", root.Name(p), fsroot.Quote(target), root.Name(blobs))
		}
		p = blob
		if fi, err = root.Lstat(p); err != nil {
			return File{}, err
		}
	}
	if !fi.Mode().IsRegular() {
		return File{}, fmt.Errorf("hfcache: %s is not a regular file: %w", root.Name(p), fsroot.ErrNotRegular)
	}
	return File{Name: name.String(), Path: p, Size: fi.Size()}, nil
}
