package objstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
)

// PutFile uploads the file at path (seekable, so retries rewind it).
func PutFile(ctx context.Context, s Store, bucket, key, path string, opts PutOptions) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	return s.Put(ctx, bucket, key, f, fi.Size(), opts)
}

// PutBytes uploads b.
func PutBytes(ctx context.Context, s Store, bucket, key string, b []byte, opts PutOptions) error {
	return s.Put(ctx, bucket, key, bytes.NewReader(b), int64(len(b)), opts)
}
