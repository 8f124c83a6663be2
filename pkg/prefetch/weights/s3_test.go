package weights_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sys/unix"

	"warmd.io/warmd/internal/faultproxy"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/objstore/objstoretest"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
)

// s3Env is a fresh versitygw bucket (a dir in its posix root) and a client for it.
type s3Env struct {
	testenv.S3
	bucket string
	dir    string
}

func newS3Env(t testing.TB) s3Env {
	t.Helper()
	env := testenv.RequireS3(t)
	bucket := objstoretest.NewBucket(t, env, "weights-eng")
	return s3Env{S3: env, bucket: bucket, dir: filepath.Join(env.Root, bucket)}
}

func (s s3Env) store(t testing.TB, endpoint, mode string) *objstore.S3 {
	t.Helper()
	return objstoretest.NewClient(t, s.S3, endpoint, objstore.Options{Checksums: mode, Backoff: objstore.Backoff{Attempts: 6, Base: 5e6, Max: 5e7}})
}

func s3Engine(t testing.TB, store objstore.Store, dataDir string, mut func(*weights.Options)) *weights.Engine {
	return newEngine(t, dataDir, func(o *weights.Options) {
		o.Open = weights.SourceOpener(func(context.Context) (objstore.Store, error) { return store, nil })
		if mut != nil {
			mut(o)
		}
	})
}

// putMultipart uploads b as a multipart object with CRC32C part checksums (a composite checksum).
func putMultipart(t testing.TB, c *s3.Client, bucket, key string, b []byte, partSize int) {
	t.Helper()
	objstoretest.PutMultipart(t, c, bucket, key, b, partSize, types.ChecksumAlgorithmCrc32c, types.ChecksumTypeComposite)
}

func TestS3Verification(t *testing.T) {
	t.Parallel()
	big := "model-00001-of-00002.safetensors"
	for _, mode := range []string{objstore.ChecksumsWhenRequired, objstore.ChecksumsWhenSupported} {
		for _, tc := range []struct {
			name     string
			manifest bool
			setup    func(t *testing.T, e s3Env, st *objstore.S3, m fakeModel)
			want     map[string]string // file → method; others: wantOther
			other    string
		}{
			{"placed files have sizes only", false, func(t *testing.T, e s3Env, _ *objstore.S3, m fakeModel) { m.writeDir(t, filepath.Join(e.dir, "m")) },
				nil, prefetch.VerifiedSize},
			{"placed files with a sha256 manifest", true, func(t *testing.T, e s3Env, _ *objstore.S3, m fakeModel) { m.writeDir(t, filepath.Join(e.dir, "m")) },
				nil, prefetch.VerifiedManifest},
			{"single-part ETags (MD5)", false, func(t *testing.T, e s3Env, _ *objstore.S3, m fakeModel) {
				// Placed files with the ETag versitygw serves from the user.etag xattr and no checksum.
				m.writeDir(t, filepath.Join(e.dir, "m"))
				for n, b := range m {
					sum := md5.Sum(b)
					if err := unix.Setxattr(filepath.Join(e.dir, "m", n), "user.etag", []byte(hex.EncodeToString(sum[:])), 0); err != nil {
						testenv.Unavailable(t, fmt.Sprintf("cannot set the user.etag xattr on the versitygw root (put WARMD_TEST_S3_ROOT on a file system with user xattrs, as `make test` does): %v", err))
					}
				}
			}, nil, prefetch.VerifiedETag},
			{"uploads get a default checksum", false, func(t *testing.T, e s3Env, st *objstore.S3, m fakeModel) {
				m.put(t, st, e.bucket, "m/", objstore.PutOptions{})
			}, nil, prefetch.VerifiedChecksum},
			{"stored CRC32C checksums", false, func(t *testing.T, e s3Env, st *objstore.S3, m fakeModel) {
				m.put(t, st, e.bucket, "m/", objstore.PutOptions{ChecksumAlgorithm: "CRC32C"})
			}, nil, prefetch.VerifiedChecksum},
			{"stored CRC64NVME checksums", false, func(t *testing.T, e s3Env, st *objstore.S3, m fakeModel) {
				m.put(t, st, e.bucket, "m/", objstore.PutOptions{ChecksumAlgorithm: "CRC64NVME"})
			}, nil, prefetch.VerifiedChecksum},
			{"full-object CRC64NVME multipart checksum", false, func(t *testing.T, e s3Env, st *objstore.S3, m fakeModel) {
				// What aws s3 cp and the SDKs' upload managers store for a large file: the parts'
				// CRCs combined into the whole object's, verified from the streamed chunks.
				for k, v := range m {
					if k == big {
						objstoretest.PutMultipart(t, st.Client(), e.bucket, "m/"+k, v, 5<<20, types.ChecksumAlgorithmCrc64nvme, types.ChecksumTypeFullObject)
					} else if err := objstore.PutBytes(context.Background(), st, e.bucket, "m/"+k, v, objstore.PutOptions{ChecksumAlgorithm: "CRC64NVME"}); err != nil {
						t.Fatal(err)
					}
				}
			}, nil, prefetch.VerifiedChecksum},
			{"composite multipart checksum", false, func(t *testing.T, e s3Env, st *objstore.S3, m fakeModel) {
				small := fakeModel{}
				for k, v := range m {
					if k != big {
						small[k] = v
					}
				}
				small.put(t, st, e.bucket, "m/", objstore.PutOptions{ChecksumAlgorithm: "CRC32C"})
				putMultipart(t, st.Client(), e.bucket, "m/"+big, m[big], 5<<20)
			}, map[string]string{big: prefetch.VerifiedComposite}, prefetch.VerifiedChecksum},
		} {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				env := newS3Env(t)
				st := env.store(t, "", mode)
				m := newFakeModel(3, 11<<20+333, 2<<20+1)
				if tc.manifest {
					m["SHA256SUMS"] = m.manifest()
				}
				tc.setup(t, env, st, m)
				e := s3Engine(t, st, t.TempDir(), nil)
				model := config.Model{Name: "acme/verify", Source: fmt.Sprintf("s3://%s/m/", env.bucket), Revision: "r1"}
				if tc.manifest {
					model.SHA256Manifest = "SHA256SUMS"
				}
				res, err := e.Fetch(context.Background(), model, nil)
				if err != nil {
					t.Fatal(err)
				}
				checkSnapshot(t, res.SnapshotPath, m)
				for _, fv := range res.Files {
					want, ok := tc.want[fv.Name]
					if !ok {
						want = tc.other
					}
					if fv.Name == "SHA256SUMS" {
						want = prefetch.VerifiedSize // the manifest cannot vouch for itself
					}
					if fv.Method != want {
						t.Errorf("%s verified by %s (%s), want %s", fv.Name, fv.Method, fv.Digest, want)
					}
					if strings.Contains(tc.name, "CRC64NVME") && fv.Method == prefetch.VerifiedChecksum && !strings.HasPrefix(fv.Digest, "CRC64NVME:") {
						t.Errorf("%s verified as %s, want the stored CRC64NVME", fv.Name, fv.Digest)
					}
					// Full-object CRCs are checked from the streamed chunks, without a read-back.
					if wantStreamed := fv.Method == prefetch.VerifiedChecksum && fv.Size > 0 && !strings.HasPrefix(fv.Digest, "SHA"); fv.Streamed != wantStreamed {
						t.Errorf("%s (%s, %d bytes) streamed=%v, want %v", fv.Name, fv.Digest, fv.Size, fv.Streamed, wantStreamed)
					}
				}
			})
		}
	}
}

func TestS3Faults(t *testing.T) {
	t.Parallel()
	env := newS3Env(t)
	direct := env.store(t, "", "")
	m := newFakeModel(4, 5<<20+99, 3<<20+7, 1234)
	m.put(t, direct, env.bucket, "m/", objstore.PutOptions{}) // MD5 ETags: corruption is detectable
	proxy, err := faultproxy.Start(env.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	for _, tc := range []struct {
		name   string
		faults faultproxy.Faults
	}{
		{"503 SlowDown", faultproxy.Faults{SlowDown: 12}},
		{"resets and short reads", faultproxy.Faults{Reset: 6}},
		{"corrupted bytes", faultproxy.Faults{Corrupt: 2}},
		{"all at once", faultproxy.Faults{SlowDown: 5, Reset: 3, Corrupt: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proxy.Injected()
			want := int64(tc.faults.SlowDown + tc.faults.Reset + tc.faults.Corrupt)
			proxy.Inject(tc.faults)
			e := s3Engine(t, env.store(t, proxy.URL, ""), t.TempDir(), nil)
			res, err := e.Fetch(context.Background(), config.Model{Name: "acme/faulty", Source: "s3://" + env.bucket + "/m/"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := proxy.Injected() - before; got != want {
				t.Fatalf("%d faults injected, want %d (pending %+v)", got, want, proxy.Pending())
			}
			checkSnapshot(t, res.SnapshotPath, m)
		})
	}
}
