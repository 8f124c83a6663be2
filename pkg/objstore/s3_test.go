package objstore_test

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
	"warmd.io/warmd/pkg/objstore/objstoretest"
)

// newVersity returns a client for the test versitygw and a fresh bucket (a dir in its posix root).
func newVersity(t *testing.T, mode string) (*objstore.S3, string) {
	t.Helper()
	env := testenv.RequireS3(t)
	bucket := fmt.Sprintf("weights-objstore-%d", rand.Uint32())
	dir := filepath.Join(env.Root, bucket)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := objstore.NewS3(context.Background(), config.S3{Endpoint: env.Endpoint}, objstore.Options{
		Checksums:   mode,
		Credentials: credentials.NewStaticCredentialsProvider(env.AccessKey, env.SecretKey, ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, bucket
}

func TestS3Conformance(t *testing.T) {
	if os.Getenv("AWS_CA_BUNDLE") == "" {
		// The client must work with it set, as it is on our machines and likely in CI.
		t.Setenv("AWS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
	}
	for _, mode := range []string{objstore.ChecksumsWhenRequired, objstore.ChecksumsWhenSupported} {
		t.Run(mode, func(t *testing.T) {
			c, bucket := newVersity(t, mode)
			objstoretest.Run(t, c, bucket)
		})
	}
}
