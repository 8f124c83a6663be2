// Package objstore owns warmd's one S3 client setup, shared by weight prefetch and compile-cache
// sharing: how the client is configured (endpoint, region, path style, profile, credentials from the
// default AWS chain, checksum modes, the AWS_CA_BUNDLE), ranged reads into caller buffers, uploads
// that may refuse to overwrite, and retries with jittered backoff for throttling, resets and short
// reads. Callers see the small Store interface; Memory is a hand-written fake of it, and
// objstoretest.Run is the conformance suite both must pass.
//
// It owns no policy: what to fetch, where to write, how to verify a whole model or bundle belongs to
// the callers (pkg/prefetch, pkg/cache).
package objstore

import (
	"context"
	"errors"
	"io"
	"time"
)

// Store is what warmd needs from an object store.
type Store interface {
	// List returns every object under prefix (recursively), sorted by key.
	List(ctx context.Context, bucket, prefix string) ([]Object, error)
	// Head returns one object's metadata including its stored checksum, if the store keeps one.
	Head(ctx context.Context, bucket, key string) (Object, error)
	// ReadRange fills buf with the object's bytes from off to off+len(buf). A short body is retried
	// from where it stopped; it returns an error only when the range could not be read in full.
	ReadRange(ctx context.Context, bucket, key string, off int64, buf []byte) error
	// GetRange streams n bytes from off into w in order (w sees each byte once), resuming from where
	// a reset or short body stopped; callers bound memory by w, not by n.
	GetRange(ctx context.Context, bucket, key string, off, n int64, w io.Writer) (int64, error)
	// Get streams the whole object into w, resuming with a ranged GET after a reset or short read.
	Get(ctx context.Context, bucket, key string, w io.Writer) (int64, error)
	// Put uploads size bytes from body (which must be seekable: retries and signing rewind it).
	Put(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64, opts PutOptions) error
	// Parts returns the parts of a multipart object with their checksums (nil for a single-part
	// object), so a composite checksum can be verified part by part.
	Parts(ctx context.Context, bucket, key string) ([]Part, error)
}

// Object is one stored object.
type Object struct {
	Key          string
	Size         int64
	ETag         string // without quotes
	LastModified time.Time
	// Checksum is the store's own checksum of the object, when it keeps one (Head only; List leaves
	// it empty on stores that do not return it in listings).
	Checksum Checksum
}

// Checksum is a stored S3 checksum.
type Checksum struct {
	// Algorithm is CRC32, CRC32C, CRC64NVME, SHA1 or SHA256; empty when the store gave none.
	Algorithm string
	// Value is the base64 digest as S3 reports it; composite values carry a "-<parts>" suffix.
	Value string
	// Composite is true for a checksum of part checksums (multipart uploads, ChecksumType COMPOSITE).
	Composite bool
}

// MaxParts is S3's own limit on the parts of one multipart upload: a part list longer than this is
// outside input that is not one, and is refused.
const MaxParts = 10_000

// Part is one part of a multipart object.
//
// A store's part list holds at most MaxParts parts (S3's own limit); a longer one is refused.
type Part struct {
	Number   int
	Size     int64
	Checksum string // base64, same algorithm as the object's checksum
}

// PutOptions tune Put.
type PutOptions struct {
	// IfNoneMatch makes the upload fail with ErrExists when the key already exists, so
	// content-addressed writers never overwrite (S3 conditional writes, If-None-Match: *).
	IfNoneMatch bool
	// ChecksumAlgorithm asks the store to compute and keep a checksum (e.g. CRC32C). Empty: none asked.
	ChecksumAlgorithm string
}

// Sentinel errors callers branch on.
var (
	// ErrNotFound: the bucket or key does not exist.
	ErrNotFound = errors.New("object not found")
	// ErrExists: a Put with IfNoneMatch found the key already there.
	ErrExists = errors.New("object already exists")
)
