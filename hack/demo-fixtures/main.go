// Command demo-fixtures puts what `make demo` warms into the local services: a small generated model
// (config.json, three safetensors shards with valid headers, the index) uploaded to S3 through warmd's
// own S3 client, and a small image pushed to the registry. It prints what it made.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo-fixtures:", err)
		os.Exit(1)
	}
}

func run() error {
	endpoint := flag.String("s3", "", "S3 endpoint (http://127.0.0.1:PORT)")
	bucket := flag.String("bucket", "models", "bucket to create")
	prefix := flag.String("prefix", "tiny-model/", "key prefix for the model files")
	image := flag.String("image", "", "image ref to push (127.0.0.1:PORT/repo:tag)")
	flag.Parse()
	if *endpoint == "" || *image == "" {
		return errors.New("need --s3 and --image")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := objstore.NewS3(ctx, config.S3{Endpoint: *endpoint, UsePathStyle: aws.Bool(true)}, objstore.Options{})
	if err != nil {
		return err
	}
	if _, err := st.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: bucket}); err != nil {
		return fmt.Errorf("create bucket %s: %w", *bucket, err)
	}
	m, err := fixtures.NewModel(fixtures.ModelSpec{Shards: 3, TensorsA: 8, BytesPerTensor: 2 << 20, Seed: 42})
	if err != nil {
		return err
	}
	var total int64
	for _, name := range m.Names() {
		b := m.Files[name]
		if err := st.Put(ctx, *bucket, *prefix+name, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
			return fmt.Errorf("upload %s: %w", name, err)
		}
		total += int64(len(b))
		fmt.Printf("  s3://%s/%s%s (%d bytes)\n", *bucket, *prefix, name, len(b))
	}
	fmt.Printf("uploaded a %d-file model, %.1f MiB\n", len(m.Files), float64(total)/(1<<20))
	digest, err := fixtures.PushRandomImage(*image, 4<<20, 3)
	if err != nil {
		return err
	}
	fmt.Printf("pushed image %s@%s (3 layers of 4 MiB)\n", *image, digest)
	return nil
}
