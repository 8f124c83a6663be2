// Package s3 is the weights Source for s3://bucket/prefix/ (AWS S3 and S3-compatible stores), reading
// through the shared objstore client. It owns the mapping of model file names to keys, and refuses
// keys that are not safe relative paths (see package source) before the engine sees them.
package s3

import (
	"context"
	"fmt"
	"io"
	"strings"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights/source"
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

// List implements prefetch.Source. Empty "dir/" keys are folder markers (the S3 console makes
// them) and are skipped; every other key must be a safe relative name below the prefix.
func (s *Source) List(ctx context.Context) (prefetch.Listing, error) {
	objs, err := s.store.List(ctx, s.bucket, s.prefix)
	if err != nil {
		return prefetch.Listing{}, err
	}
	l := source.Lister{Fix: "rename or delete those objects in the bucket"}
	for _, o := range objs {
		name, ok := strings.CutPrefix(o.Key, s.prefix)
		if !ok {
			l.Refuse(o.Key, "is not under the prefix "+fsroot.Quote(s.prefix)+" the listing asked for")
			continue
		}
		if strings.HasSuffix(name, "/") || name == "" {
			if o.Size != 0 {
				l.Refuse(name, fmt.Sprintf(`ends with "/" but holds %d bytes (a folder marker is empty)`, o.Size))
			}
			continue
		}
		l.Add(name, o)
	}
	return l.Listing()
}

// Head implements prefetch.Source.
func (s *Source) Head(ctx context.Context, name fsroot.Path) (objstore.Object, error) {
	o, err := s.store.Head(ctx, s.bucket, s.prefix+name.String())
	o.Key = name.String()
	return o, err
}

// Parts implements prefetch.Source.
func (s *Source) Parts(ctx context.Context, name fsroot.Path) ([]objstore.Part, error) {
	return s.store.Parts(ctx, s.bucket, s.prefix+name.String())
}

// GetRange implements prefetch.Source.
func (s *Source) GetRange(ctx context.Context, name fsroot.Path, off, n int64, w io.Writer) (int64, error) {
	return s.store.GetRange(ctx, s.bucket, s.prefix+name.String(), off, n, w)
}
