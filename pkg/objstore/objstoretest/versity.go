package objstoretest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
)

// NewBucket creates a fresh bucket named prefix-<random> on the test versitygw (a dir in its posix
// root) and removes it when t ends.
func NewBucket(t testing.TB, env testenv.S3, prefix string) string {
	t.Helper()
	bucket := fmt.Sprintf("%s-%d", prefix, rand.Uint32())
	dir := filepath.Join(env.Root, bucket)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return bucket
}

// NewClient returns the S3 client for endpoint (env's own when empty) with env's credentials and the
// other options from o.
func NewClient(t testing.TB, env testenv.S3, endpoint string, o objstore.Options) *objstore.S3 {
	t.Helper()
	if endpoint == "" {
		endpoint = env.Endpoint
	}
	o.Credentials = credentials.NewStaticCredentialsProvider(env.AccessKey, env.SecretKey, "")
	c, err := objstore.NewS3(context.Background(), config.S3{Endpoint: endpoint}, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Versity returns a client for the test versitygw (`make testenv`; skipped outside CI without it)
// and a fresh bucket named prefix-<random>.
func Versity(t testing.TB, prefix string, o objstore.Options) (*objstore.S3, string) {
	t.Helper()
	env := testenv.RequireS3(t)
	return NewClient(t, env, "", o), NewBucket(t, env, prefix)
}
