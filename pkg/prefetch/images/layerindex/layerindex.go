// Package layerindex keeps the gzip checkpoint indexes of image layers under the data dir, named by
// the compressed layer's digest, so a layer this node inflated once decodes on every core the next
// time it is pulled (after the image was collected, or for another image sharing the layer). Writes
// go through pkg/fsroot, so an index is published whole or not at all; reads are bounded. What is
// read is still hostile input to pkg/inflate, which validates it.
package layerindex

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	digest "github.com/opencontainers/go-digest"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/prefetch/images/containerd"
)

// MaxIndexBytes bounds one stored index (containerd.MaxIndexBytes).
const MaxIndexBytes = containerd.MaxIndexBytes

// Dir is an IndexStore in a directory of the data dir.
type Dir struct {
	root *fsroot.Root
	dir  fsroot.Path
}

var (
	_ containerd.IndexStore   = (*Dir)(nil)
	_ containerd.LocalIndexes = (*Dir)(nil)
)

// Open keeps indexes under dir (a path inside root), creating it.
func Open(root *fsroot.Root, dir fsroot.Path) (*Dir, error) {
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("layer index dir: %w", err)
	}
	return &Dir{root: root, dir: dir}, nil
}

func (d *Dir) path(layer digest.Digest) (fsroot.Path, error) {
	if err := layer.Validate(); err != nil {
		return fsroot.Path{}, fmt.Errorf("layer digest: %w", err)
	}
	return fsroot.Join(d.dir.String(), layer.Algorithm().String()+"-"+layer.Encoded()+".gzidx")
}

// Get returns the stored index of layer, or nil when there is none.
func (d *Dir) Get(_ context.Context, layer digest.Digest) ([]byte, error) {
	p, err := d.path(layer)
	if err != nil {
		return nil, err
	}
	b, err := d.root.ReadFile(p, MaxIndexBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// Put stores layer's index whole (a temp file renamed into place).
func (d *Dir) Put(_ context.Context, layer digest.Digest, index []byte) error {
	if len(index) > MaxIndexBytes {
		return fmt.Errorf("index of %s is %d bytes (at most %d)", layer, len(index), MaxIndexBytes)
	}
	p, err := d.path(layer)
	if err != nil {
		return err
	}
	return d.root.WriteFile(p, index, 0o644)
}

// Open opens the stored index of layer for reading (the peer server sends it to fresh nodes).
func (d *Dir) Open(layer digest.Digest) (*os.File, error) {
	p, err := d.path(layer)
	if err != nil {
		return nil, err
	}
	return d.root.Open(p)
}

// PutLocal is Put: a Dir has nothing beyond this node.
func (d *Dir) PutLocal(ctx context.Context, layer digest.Digest, index []byte) error {
	return d.Put(ctx, layer, index)
}

// Remove drops layer's index (one that failed to decode its layer).
func (d *Dir) Remove(_ context.Context, layer digest.Digest) error {
	p, err := d.path(layer)
	if err != nil {
		return err
	}
	if err := d.root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
