package cache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path"
	"slices"
	"time"

	"warmd.io/warmd/pkg/cache/bundle"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/peer"
)

// Share is the bucket side of one SKU:
//
//	<prefix>/<sku>/<component>/<sha256>.tar.zst   bundle (content-addressed, written once)
//	<prefix>/<sku>/<component>/<sha256>.json      its manifest
//	<prefix>/<sku>/index/<generation>.json        the index, one immutable object per generation
//	<prefix>/<sku>/index.json                     a copy of a recent generation: where readers start
//
// Concurrency without If-Match: every object is written with If-None-Match, so nothing is ever
// overwritten except index.json. A writer reads the newest generation N, adds its bundles, and
// claims generation N+1 with a conditional put; losing the race (ErrExists) means another node
// published first, so it re-reads and retries. Every generation is therefore a complete index that
// includes all earlier ones: two nodes can never lose each other's entries or leave a torn index.
// index.json may lag behind (a slow writer copies an older generation over a newer one); readers
// start there and step forward until the next generation is missing, so lag costs a GET, not data.
type Share struct {
	Store  objstore.Store
	Bucket string
	Prefix string
	SKU    string
	Log    *slog.Logger
}

// Index lists a SKU's bundles.
type Index struct {
	Schema     int          `json:"schema"`
	SKU        string       `json:"sku"`
	Generation int64        `json:"generation"`
	Updated    time.Time    `json:"updated"`
	Bundles    []IndexEntry `json:"bundles"`
}

// IndexEntry is one bundle in the index.
type IndexEntry struct {
	SHA256    string              `json:"sha256"`
	Component string              `json:"component"`
	Size      int64               `json:"size"`
	Bytes     int64               `json:"bytes"`
	Files     int                 `json:"files"`
	Node      string              `json:"node,omitempty"`
	Created   time.Time           `json:"created"`
	Versions  map[string][]string `json:"versions,omitempty"`
}

func (s *Share) base() string { return path.Join(s.Prefix, s.SKU) }

// BundleKey is the object key of a bundle.
func (s *Share) BundleKey(component, sha string) string {
	return path.Join(s.base(), component, sha+bundle.Ext)
}

// ManifestKey is the object key of a bundle's manifest.
func (s *Share) ManifestKey(component, sha string) string {
	return path.Join(s.base(), component, sha+".json")
}

// IndexKey is the key readers start from.
func (s *Share) IndexKey() string { return path.Join(s.base(), "index.json") }

func (s *Share) genKey(gen int64) string {
	return path.Join(s.base(), "index", fmt.Sprintf("%012d.json", gen))
}

// ReadIndex returns the newest index generation (an empty one when none exists yet). An index
// that names another SKU is refused with ErrOtherSKU.
func (s *Share) ReadIndex(ctx context.Context) (Index, error) {
	idx := Index{Schema: 1, SKU: s.SKU}
	start, err := s.getIndex(ctx, s.IndexKey())
	switch {
	case errors.Is(err, objstore.ErrNotFound):
	case err != nil:
		return idx, err
	default:
		idx = start
	}
	for {
		next, err := s.getIndex(ctx, s.genKey(idx.Generation+1))
		if errors.Is(err, objstore.ErrNotFound) {
			return idx, nil
		}
		if err != nil {
			return idx, err
		}
		if next.Generation != idx.Generation+1 {
			return idx, fmt.Errorf("index object %s holds another generation number: the bucket prefix holds foreign objects (remove s3://%s/%s/index and let nodes republish)", s.genKey(idx.Generation+1), s.Bucket, s.base())
		}
		idx = next
	}
}

func (s *Share) getIndex(ctx context.Context, key string) (Index, error) {
	var buf bytes.Buffer
	if _, err := s.Store.Get(ctx, s.Bucket, key, &limitedBuffer{b: &buf, left: maxIndexBytes, what: "index"}); err != nil {
		return Index{}, err
	}
	// Errors below name the object, our field names and entry indexes, never the object's text: a
	// bucket is outside input, and what it says must not reach logs, status or the Node verbatim.
	var idx Index
	if err := json.Unmarshal(buf.Bytes(), &idx); err != nil {
		return Index{}, fmt.Errorf("read index s3://%s/%s: %w (delete it; nodes republish their bundles)", s.Bucket, key, bundle.JSONError(err))
	}
	if idx.SKU != s.SKU {
		other := "an invalid SKU key"
		if CheckSKU(idx.SKU) == nil {
			other = fmt.Sprintf("SKU %q", idx.SKU)
		}
		return Index{}, fmt.Errorf("%w: index s3://%s/%s is for %s, this node is %q; refusing it (someone copied another SKU's caches under this prefix)", ErrOtherSKU, s.Bucket, key, other, s.SKU)
	}
	for i, e := range idx.Bundles {
		if !validSHA256(e.SHA256) {
			return Index{}, fmt.Errorf("index s3://%s/%s: bundles[%d].sha256 is not 64 lowercase hex digits", s.Bucket, key, i)
		}
		if !validComponent(e.Component) {
			return Index{}, fmt.Errorf("index s3://%s/%s: bundles[%d].component is not one of %v", s.Bucket, key, i, Components)
		}
		if e.Size < 0 || e.Bytes < 0 || e.Files < 0 {
			return Index{}, fmt.Errorf("index s3://%s/%s: bundles[%d] has a negative size", s.Bucket, key, i)
		}
	}
	return idx, nil
}

// ReadManifest fetches and checks the manifest published next to a bundle. It returns an error
// wrapping objstore.ErrNotFound when there is none.
func (s *Share) ReadManifest(ctx context.Context, component, sha string) (*bundle.Manifest, error) {
	var buf bytes.Buffer
	key := s.ManifestKey(component, sha)
	if _, err := s.Store.Get(ctx, s.Bucket, key, &limitedBuffer{b: &buf, left: maxManifestBytes, what: "manifest"}); err != nil {
		return nil, fmt.Errorf("read manifest s3://%s/%s: %w", s.Bucket, key, err)
	}
	mf, err := bundle.ParseManifest(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("read manifest s3://%s/%s: %w", s.Bucket, key, err)
	}
	return mf, nil
}

// validSHA256 accepts a lowercase hex sha256, the only thing a bundle may be named.
func validSHA256(s string) bool { return peer.ValidDigest(s) }

// Publish adds entries to the index (those already present are skipped) and returns the index
// generation that holds them all.
func (s *Share) Publish(ctx context.Context, entries []IndexEntry) (Index, error) {
	for attempt := 0; ; attempt++ {
		idx, err := s.ReadIndex(ctx)
		if err != nil {
			return idx, err
		}
		have := map[string]bool{}
		for _, e := range idx.Bundles {
			have[e.SHA256] = true
		}
		next := idx
		next.Bundles = slices.Clone(idx.Bundles)
		for _, e := range entries {
			if !have[e.SHA256] {
				have[e.SHA256] = true
				next.Bundles = append(next.Bundles, e)
			}
		}
		if len(next.Bundles) == len(idx.Bundles) {
			return idx, nil
		}
		next.Schema, next.SKU, next.Generation, next.Updated = 1, s.SKU, idx.Generation+1, time.Now().UTC()
		body, err := json.Marshal(next)
		if err != nil {
			return idx, fmt.Errorf("encode index: %w", err)
		}
		err = objstore.PutBytes(ctx, s.Store, s.Bucket, s.genKey(next.Generation), body, objstore.PutOptions{IfNoneMatch: true})
		if errors.Is(err, objstore.ErrExists) {
			if attempt >= 100 {
				return idx, fmt.Errorf("publish to index s3://%s/%s: lost the race %d times; retry later", s.Bucket, s.IndexKey(), attempt+1)
			}
			// Another node claimed this generation: back off with jitter, re-read, retry.
			d := time.Duration(rand.Int64N(int64(time.Millisecond) * int64(5+min(attempt, 20)*5)))
			select {
			case <-ctx.Done():
				return idx, ctx.Err()
			case <-time.After(d):
			}
			continue
		}
		if err != nil {
			return idx, fmt.Errorf("publish index generation %d: %w", next.Generation, err)
		}
		// Best effort: move the readers' starting point forward.
		if err := objstore.PutBytes(ctx, s.Store, s.Bucket, s.IndexKey(), body, objstore.PutOptions{}); err != nil && s.Log != nil {
			s.Log.Warn("could not update index.json (readers step forward from the older one)", "err", err)
		}
		return next, nil
	}
}

// Bounds on what is read from the bucket into memory.
const (
	maxIndexBytes    = 256 << 20
	maxManifestBytes = 64 << 20
)

type limitedBuffer struct {
	b    *bytes.Buffer
	left int64
	what string
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, objstore.WriterError(fmt.Errorf("%s larger than its limit", l.what))
	}
	l.left -= int64(len(p))
	return l.b.Write(p)
}

var _ io.Writer = (*limitedBuffer)(nil)
