package objstoretest

import (
	"bytes"
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// PutMultipart uploads b to bucket/key as a multipart object of partSize parts (the last shorter)
// with alg part checksums, combined by the store into a checksum of type typ (COMPOSITE: a checksum
// of the parts' checksums, as `aws s3 cp --checksum-algorithm CRC32C` stores big files; FULL_OBJECT:
// the CRC of the whole object, as the AWS CLI and SDKs upload with CRC64NVME by default). Stores
// want parts of 5 MiB at least, but the last.
func PutMultipart(t testing.TB, c *s3.Client, bucket, key string, b []byte, partSize int, alg types.ChecksumAlgorithm, typ types.ChecksumType) {
	t.Helper()
	ctx := context.Background()
	mp, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key,
		ChecksumAlgorithm: alg, ChecksumType: typ})
	if err != nil {
		t.Fatal(err)
	}
	var parts []types.CompletedPart
	for i, off := int32(1), 0; off < len(b); i, off = i+1, off+partSize {
		end := min(off+partSize, len(b))
		up, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: &key, UploadId: mp.UploadId, PartNumber: aws.Int32(i),
			Body: bytes.NewReader(b[off:end]), ChecksumAlgorithm: alg})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, types.CompletedPart{ETag: up.ETag, PartNumber: aws.Int32(i),
			ChecksumCRC32C: up.ChecksumCRC32C, ChecksumCRC32: up.ChecksumCRC32, ChecksumCRC64NVME: up.ChecksumCRC64NVME})
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: mp.UploadId,
		ChecksumType: typ, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatal(err)
	}
}
