package weights_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"warmd.io/warmd/internal/hostiles3"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch/weights"
)

// A store whose full-object checksum does not match the bytes it serves (a corrupt object, or a
// checksum from another version) fails the model with ErrVerify naming the file, after the
// refetches, and publishes nothing: no snapshot, no blob a loader could open. versitygw computes
// its checksums itself and cannot be made to lie, so the hostile stub serves the wrong value.
func TestMismatchingChecksumIsRefused(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"CRC64NVME", "CRC32C"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			m := newFakeModel(9, 3<<20+17, 1<<20+5)
			bad := "model-00002-of-00002.safetensors"
			if _, ok := m[bad]; !ok {
				t.Fatalf("fake model has no %s", bad)
			}
			stub := hostiles3.New(t, "hostile")
			wrong := map[string]string{"CRC64NVME": "AAAAAAAAAAA=", "CRC32C": "AAAAAA=="}[alg]
			for k, v := range m {
				o := hostiles3.Object{Key: "m/" + k, Data: v, ChecksumAlgorithm: alg}
				if k == bad {
					o.Checksum = wrong
				}
				stub.Put(o)
			}
			st, err := objstore.NewS3(context.Background(), config.S3{Endpoint: stub.Endpoint()}, objstore.Options{
				Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
				Backoff:     objstore.Backoff{Attempts: 1},
			})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			e := s3Engine(t, st, dir, nil)
			res, err := e.Fetch(context.Background(), config.Model{Name: "acme/lying", Source: "s3://hostile/m/", Revision: "r1"}, nil)
			if !errors.Is(err, weights.ErrVerify) {
				t.Fatalf("Fetch = %+v, %v; want ErrVerify", res, err)
			}
			if !strings.Contains(err.Error(), bad) {
				t.Errorf("error %q does not name the mismatching file %s", err, bad)
			}
			gets := 0
			for _, r := range stub.Requests() {
				if r.Method == "GET" && r.Key == "m/"+bad {
					gets++
				}
			}
			if gets < 2 {
				t.Errorf("%s fetched %d times; a mismatch is refetched before the model fails", bad, gets)
			}
			if res.SnapshotPath != "" {
				t.Errorf("failed fetch reports snapshot %s", res.SnapshotPath)
			}
			snaps, err := filepath.Glob(filepath.Join(dir, "models--acme--lying", "snapshots", "*"))
			if err != nil {
				t.Fatal(err)
			}
			if len(snaps) != 0 {
				t.Errorf("published %v after a checksum mismatch", snaps)
			}
			blobs, _ := os.ReadDir(filepath.Join(dir, "models--acme--lying", "blobs"))
			for _, b := range blobs {
				t.Errorf("published blob %s after a checksum mismatch", b.Name())
			}
		})
	}
}
