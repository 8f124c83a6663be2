// Package s3 is the weights Source for s3://bucket/prefix/ (AWS S3 and S3-compatible stores), reading
// through the shared objstore client. It owns only the mapping of model file names to keys.
package s3

import (
	"context"
	"fmt"
	"io"
	"strings"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
)

// Source reads one model's files under an S3 prefix.
type Source struct {
	store          objstore.Store
	bucket, prefix string
}

var _ prefetch.Source = (*Source)(nil)

// New returns a Source for url (s3://bucket/prefix/) read through store.
func New(store objstore.Store, url string) (*Source, error) {
	bucket, prefix, err := config.ParseS3URL(url)
	if err != nil {
		return nil, fmt.Errorf("weights source: %w (use s3://bucket/prefix/)", err)
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Source{store: store, bucket: bucket, prefix: prefix}, nil
}

func (s *Source) String() string { return "s3://" + s.bucket + "/" + s.prefix }

// List implements prefetch.Source; "dir/" marker objects are skipped.
func (s *Source) List(ctx context.Context) ([]objstore.Object, error) {
	objs, err := s.store.List(ctx, s.bucket, s.prefix)
	if err != nil {
		return nil, err
	}
	out := objs[:0]
	for _, o := range objs {
		if strings.HasSuffix(o.Key, "/") {
			continue
		}
		o.Key = strings.TrimPrefix(o.Key, s.prefix)
		out = append(out, o)
	}
	return out, nil
}

// Head implements prefetch.Source.
func (s *Source) Head(ctx context.Context, name string) (objstore.Object, error) {
	o, err := s.store.Head(ctx, s.bucket, s.prefix+name)
	o.Key = name
	return o, err
}

// Parts implements prefetch.Source.
func (s *Source) Parts(ctx context.Context, name string) ([]objstore.Part, error) {
	return s.store.Parts(ctx, s.bucket, s.prefix+name)
}

// GetRange implements prefetch.Source.
func (s *Source) GetRange(ctx context.Context, name string, off, n int64, w io.Writer) (int64, error) {
	return s.store.GetRange(ctx, s.bucket, s.prefix+name, off, n, w)
}
