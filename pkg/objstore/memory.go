package objstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// Memory is a hand-written in-memory Store for unit tests of callers. Inject, when set, runs before
// every operation and may return an error to simulate a failing store.
type Memory struct {
	mu      sync.Mutex
	objects map[string]memObject // bucket + "/" + key
	Inject  func(op, bucket, key string) error
}

type memObject struct {
	data     []byte
	etag     string
	checksum Checksum
	modified time.Time
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store; buckets exist implicitly.
func NewMemory() *Memory { return &Memory{objects: map[string]memObject{}} }

func (m *Memory) inject(op, bucket, key string) error {
	if m.Inject != nil {
		return m.Inject(op, bucket, key)
	}
	return nil
}

func (m *Memory) get(bucket, key string) (memObject, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[bucket+"/"+key]
	if !ok {
		return memObject{}, fmt.Errorf("s3://%s/%s: %w", bucket, key, ErrNotFound)
	}
	return o, nil
}

// List implements Store.
func (m *Memory) List(_ context.Context, bucket, prefix string) ([]Object, error) {
	if err := m.inject("list", bucket, prefix); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Object
	for k, o := range m.objects {
		b, key, _ := strings.Cut(k, "/")
		if b == bucket && strings.HasPrefix(key, prefix) {
			out = append(out, Object{Key: key, Size: int64(len(o.data)), ETag: o.etag, LastModified: o.modified,
				Checksum: Checksum{Algorithm: o.checksum.Algorithm}})
		}
	}
	slices.SortFunc(out, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Head implements Store.
func (m *Memory) Head(_ context.Context, bucket, key string) (Object, error) {
	if err := m.inject("head", bucket, key); err != nil {
		return Object{}, err
	}
	o, err := m.get(bucket, key)
	if err != nil {
		return Object{}, err
	}
	return Object{Key: key, Size: int64(len(o.data)), ETag: o.etag, LastModified: o.modified, Checksum: o.checksum}, nil
}

// ReadRange implements Store.
func (m *Memory) ReadRange(_ context.Context, bucket, key string, off int64, buf []byte) error {
	if err := m.inject("get", bucket, key); err != nil {
		return err
	}
	o, err := m.get(bucket, key)
	if err != nil {
		return err
	}
	if off < 0 || off+int64(len(buf)) > int64(len(o.data)) {
		return fmt.Errorf("s3://%s/%s: range %d+%d outside %d bytes", bucket, key, off, len(buf), len(o.data))
	}
	copy(buf, o.data[off:])
	return nil
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, bucket, key string, w io.Writer) (int64, error) {
	if err := m.inject("get", bucket, key); err != nil {
		return 0, err
	}
	o, err := m.get(bucket, key)
	if err != nil {
		return 0, err
	}
	return io.Copy(w, bytes.NewReader(o.data))
}

// Put implements Store.
func (m *Memory) Put(_ context.Context, bucket, key string, body io.ReadSeeker, size int64, opts PutOptions) error {
	if err := m.inject("put", bucket, key); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(body, size+1))
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", bucket, key, err)
	}
	if int64(len(data)) != size {
		return fmt.Errorf("put s3://%s/%s: body has %d bytes, want %d", bucket, key, len(data), size)
	}
	sum := md5.Sum(data)
	o := memObject{data: data, etag: hex.EncodeToString(sum[:]), modified: time.Now().UTC()}
	if opts.ChecksumAlgorithm != "" {
		h, err := NewHash(opts.ChecksumAlgorithm)
		if err != nil {
			return err
		}
		h.Write(data)
		o.checksum = Checksum{Algorithm: opts.ChecksumAlgorithm, Value: Encode(h.Sum(nil))}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objects[bucket+"/"+key]; ok && opts.IfNoneMatch {
		return fmt.Errorf("put s3://%s/%s: %w", bucket, key, ErrExists)
	}
	m.objects[bucket+"/"+key] = o
	return nil
}

// Parts implements Store: the fake holds only single-part objects.
func (m *Memory) Parts(_ context.Context, bucket, key string) ([]Part, error) {
	_, err := m.get(bucket, key)
	return nil, err
}

// GetRange implements Store.
func (m *Memory) GetRange(_ context.Context, bucket, key string, off, n int64, w io.Writer) (int64, error) {
	if err := m.inject("get", bucket, key); err != nil {
		return 0, err
	}
	o, err := m.get(bucket, key)
	if err != nil {
		return 0, err
	}
	if off < 0 || n < 0 || off+n > int64(len(o.data)) {
		return 0, fmt.Errorf("s3://%s/%s: range %d+%d outside %d bytes", bucket, key, off, n, len(o.data))
	}
	return io.Copy(w, bytes.NewReader(o.data[off:off+n]))
}
