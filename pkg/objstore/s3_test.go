package objstore_test

import (
	"os"
	"testing"

	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/objstore/objstoretest"
)

// newVersity returns a client for the test versitygw and a fresh bucket (a dir in its posix root).
func newVersity(t *testing.T, mode string) (*objstore.S3, string) {
	t.Helper()
	return objstoretest.Versity(t, "weights-objstore", objstore.Options{Checksums: mode})
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
