package layerindex

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"sync"
	"time"

	digest "github.com/opencontainers/go-digest"

	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch/images/containerd"
)

// Shared keeps indexes on this node (a Dir) and in the bucket beside the compile caches, under
// <prefix>/gzindex/, so that the first node of a fleet that inflates a layer indexes it for all:
// every other node's first pull of that layer decodes it on every core. A layer's index is the same
// whoever builds it (it is keyed by the compressed layer's digest), so the first upload wins
// (If-None-Match) and none is ever overwritten.
//
// What comes from the bucket is hostile: it is read only up to MaxIndexBytes and within a time
// bound, pkg/inflate validates it, and the layer's output is checked against its diff ID. An index
// that fails is dropped here and not read from the bucket again by this process (the layer decodes
// serially); the bucket's copy is left alone, since a node cannot tell a bad index from a bad read.
// The bucket being unreachable costs only speed: every failure is logged and the layer decodes
// serially.
type Shared struct {
	local          *Dir
	store          objstore.Store
	bucket, prefix string
	log            *slog.Logger

	mu      sync.Mutex
	bad     map[digest.Digest]bool
	uploads sync.WaitGroup
	slots   chan struct{} // uploads in flight
}

var (
	_ containerd.IndexStore   = (*Shared)(nil)
	_ containerd.LocalIndexes = (*Shared)(nil)
)

// Time bounds on one index's read and upload (an index is a few MiB for a layer of several GiB).
const (
	readTimeout   = 2 * time.Minute
	uploadTimeout = 5 * time.Minute
	maxUploads    = 2
)

// NewShared keeps indexes in local and in store's bucket under prefix (compileCache.remote's).
func NewShared(local *Dir, store objstore.Store, bucket, prefix string, log *slog.Logger) *Shared {
	return &Shared{local: local, store: store, bucket: bucket, prefix: prefix, log: log,
		bad: map[digest.Digest]bool{}, slots: make(chan struct{}, maxUploads)}
}

// Key is where layer's index lives in the bucket.
func (s *Shared) Key(layer digest.Digest) string {
	return path.Join(s.prefix, "gzindex", layer.Algorithm().String()+"-"+layer.Encoded()+".gzidx")
}

// Get returns this node's index of layer or else the bucket's (kept here once read), or nil.
func (s *Shared) Get(ctx context.Context, layer digest.Digest) ([]byte, error) {
	p, err := s.local.Get(ctx, layer)
	if err != nil || p != nil {
		return p, err
	}
	s.mu.Lock()
	bad := s.bad[layer]
	s.mu.Unlock()
	if bad {
		return nil, nil
	}
	key := s.Key(layer)
	p, err = s.read(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("could not read the layer's shared gzip index; decoding it serially", "layer", layer, "key", key, "err", err)
		}
		return nil, nil
	}
	if err := s.local.Put(ctx, layer, p); err != nil {
		s.log.Warn("could not keep the layer's shared gzip index on this node", "layer", layer, "err", err)
	}
	s.log.Info("layer's gzip index read from the bucket", "layer", layer, "key", key, "bytes", len(p))
	return p, nil
}

// read fetches one index object, bounded in size and time.
func (s *Shared) read(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	o, err := s.store.Head(ctx, s.bucket, key)
	if err != nil {
		return nil, err
	}
	if o.Size <= 0 || o.Size > MaxIndexBytes {
		return nil, fmt.Errorf("s3://%s/%s is %d bytes; an index is 1..%d (delete the object: nodes upload it again)", s.bucket, key, o.Size, MaxIndexBytes)
	}
	w := &capped{max: int(o.Size)}
	if _, err := s.store.Get(ctx, s.bucket, key, w); err != nil {
		return nil, err
	}
	if w.b.Len() != int(o.Size) {
		return nil, fmt.Errorf("s3://%s/%s: read %d bytes, its size is %d", s.bucket, key, w.b.Len(), o.Size)
	}
	return w.b.Bytes(), nil
}

// capped is a buffer that refuses to grow past max bytes (an object that grew after its Head).
type capped struct {
	b   bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if c.b.Len()+len(p) > c.max {
		return 0, fmt.Errorf("the object is longer than the %d bytes its metadata gave", c.max)
	}
	return c.b.Write(p)
}

// Put keeps layer's index here and uploads it in the background (Close waits for uploads), so a
// pull never waits on the bucket.
func (s *Shared) Put(ctx context.Context, layer digest.Digest, index []byte) error {
	if err := s.local.Put(ctx, layer, index); err != nil {
		return err
	}
	key := s.Key(layer)
	s.uploads.Add(1)
	go func() {
		defer s.uploads.Done()
		s.slots <- struct{}{}
		defer func() { <-s.slots }()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadTimeout)
		defer cancel()
		err := s.store.Put(ctx, s.bucket, key, bytes.NewReader(index), int64(len(index)), objstore.PutOptions{IfNoneMatch: true})
		switch {
		case errors.Is(err, objstore.ErrExists):
			s.log.Debug("layer's gzip index is in the bucket already", "layer", layer, "key", key)
		case err != nil:
			s.log.Warn("could not share the layer's gzip index; other nodes decode the layer serially", "layer", layer, "key", key, "err", err)
		default:
			s.log.Info("layer's gzip index shared", "layer", layer, "key", key, "bytes", len(index))
		}
	}()
	return nil
}

// Open opens this node's index of layer (the peer server sends it to fresh nodes).
func (s *Shared) Open(layer digest.Digest) (*os.File, error) { return s.local.Open(layer) }

// PutLocal keeps an index from elsewhere (a peer) here only: it is not uploaded before a decode
// proved it (a node that uses it builds none, and the bucket keeps the first node's own).
func (s *Shared) PutLocal(ctx context.Context, layer digest.Digest, index []byte) error {
	return s.local.Put(ctx, layer, index)
}

// Remove drops layer's index here (one that failed to decode its layer) and stops this process
// reading it from the bucket again.
func (s *Shared) Remove(ctx context.Context, layer digest.Digest) error {
	s.mu.Lock()
	s.bad[layer] = true
	s.mu.Unlock()
	return s.local.Remove(ctx, layer)
}

// Close waits for the uploads in flight (each bounded by uploadTimeout).
func (s *Shared) Close() error {
	s.uploads.Wait()
	return nil
}
