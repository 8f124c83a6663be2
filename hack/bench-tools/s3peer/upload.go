package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// upload creates bucket and puts every regular file under dir as the key of its relative path, each
// with a full-object checksum of alg that the store keeps and returns on HEAD (ChecksumMode
// ENABLED): small files in one PutObject, larger ones as a multipart upload of part-byte parts
// with ChecksumType FULL_OBJECT (the store combines the parts' CRCs into the whole object's).
func upload(ctx context.Context, c *s3.Client, bucket, dir, alg string, part int64) (int64, error) {
	if part <= 0 {
		part = 64 << 20
	}
	a := types.ChecksumAlgorithm(alg)
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		var owned *types.BucketAlreadyOwnedByYou
		if !errors.As(err, &owned) {
			return 0, fmt.Errorf("create bucket %s: %w", bucket, err)
		}
	}
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.Size() <= part {
			_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: f, ContentLength: aws.Int64(fi.Size()), ChecksumAlgorithm: a})
		} else {
			err = multipart(ctx, c, bucket, key, f, fi.Size(), part, a)
		}
		if err != nil {
			return fmt.Errorf("upload %s: %w", key, err)
		}
		n++
		return nil
	})
	return n, err
}

func multipart(ctx context.Context, c *s3.Client, bucket, key string, f *os.File, size, part int64, a types.ChecksumAlgorithm) error {
	mp, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key,
		ChecksumAlgorithm: a, ChecksumType: types.ChecksumTypeFullObject})
	if err != nil {
		return err
	}
	var parts []types.CompletedPart
	for i, off := int32(1), int64(0); off < size; i, off = i+1, off+part {
		n := min(part, size-off)
		up, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: &key, UploadId: mp.UploadId, PartNumber: aws.Int32(i),
			Body: io.NewSectionReader(f, off, n), ContentLength: aws.Int64(n), ChecksumAlgorithm: a})
		if err != nil {
			c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: mp.UploadId})
			return fmt.Errorf("part %d: %w", i, err)
		}
		parts = append(parts, types.CompletedPart{ETag: up.ETag, PartNumber: aws.Int32(i),
			ChecksumCRC32: up.ChecksumCRC32, ChecksumCRC32C: up.ChecksumCRC32C, ChecksumCRC64NVME: up.ChecksumCRC64NVME})
	}
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: mp.UploadId,
		ChecksumType: types.ChecksumTypeFullObject, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	return err
}
