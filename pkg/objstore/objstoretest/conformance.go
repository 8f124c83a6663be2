// Package objstoretest is the conformance suite every objstore.Store passes: the in-memory fake and
// the real S3 client against versitygw run the same cases, so the fake cannot drift from the real thing.
package objstoretest

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"warmd.io/warmd/pkg/objstore"
)

// Run runs the suite. bucket must exist and be empty. Every store warmd uses must keep the checksums
// Put asks for (weights verify against them) and honour If-None-Match (the compile-cache index claims
// generations with it), so both are part of conformance, not options.
func Run(t *testing.T, s objstore.Store, bucket string) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	mustPut := func(t *testing.T, key string, b []byte, po objstore.PutOptions) {
		t.Helper()
		if err := objstore.PutBytes(ctx, s, bucket, key, b, po); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	mustPut(t, "m/a.bin", data, objstore.PutOptions{})
	mustPut(t, "m/sub/empty", nil, objstore.PutOptions{})
	mustPut(t, "other/x", []byte("x"), objstore.PutOptions{})

	t.Run("list", func(t *testing.T) {
		objs, err := s.List(ctx, bucket, "m/")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{"m/a.bin": int64(len(data)), "m/sub/empty": 0}
		if len(objs) != len(want) {
			t.Fatalf("List(m/) = %+v, want keys %v", objs, want)
		}
		sum := md5.Sum(data)
		for _, ob := range objs {
			if sz, ok := want[ob.Key]; !ok || sz != ob.Size {
				t.Errorf("object %s size %d, want %v", ob.Key, ob.Size, want)
			}
			if ob.Key == "m/a.bin" && ob.ETag != "" && ob.ETag != hex.EncodeToString(sum[:]) {
				t.Errorf("single-part ETag %q is not the MD5 %x", ob.ETag, sum)
			}
		}
	})
	t.Run("head", func(t *testing.T) {
		ob, err := s.Head(ctx, bucket, "m/a.bin")
		if err != nil {
			t.Fatal(err)
		}
		if ob.Size != int64(len(data)) {
			t.Errorf("Head size %d, want %d", ob.Size, len(data))
		}
	})
	t.Run("ranges", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			off, len int64
		}{
			{"start", 0, 1 << 20}, {"middle unaligned", 12345, 1<<20 + 3}, {"tail", int64(len(data)) - 17, 17},
			{"one byte", 7, 1}, {"empty", 5, 0}, {"whole", 0, int64(len(data))},
		} {
			t.Run(tc.name, func(t *testing.T) {
				buf := make([]byte, tc.len)
				if err := s.ReadRange(ctx, bucket, "m/a.bin", tc.off, buf); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf, data[tc.off:tc.off+tc.len]) {
					t.Errorf("range %d+%d: bytes differ", tc.off, tc.len)
				}
				var b bytes.Buffer
				n, err := s.GetRange(ctx, bucket, "m/a.bin", tc.off, tc.len, &b)
				if err != nil || n != tc.len || !bytes.Equal(b.Bytes(), data[tc.off:tc.off+tc.len]) {
					t.Errorf("GetRange %d+%d = %d, %v; bytes equal %v", tc.off, tc.len, n, err, bytes.Equal(b.Bytes(), data[tc.off:tc.off+tc.len]))
				}
			})
		}
	})
	t.Run("get", func(t *testing.T) {
		var b bytes.Buffer
		n, err := s.Get(ctx, bucket, "m/a.bin", &b)
		if err != nil || n != int64(len(data)) || !bytes.Equal(b.Bytes(), data) {
			t.Fatalf("Get = %d, %v; bytes equal %v", n, err, bytes.Equal(b.Bytes(), data))
		}
		b.Reset()
		if n, err := s.Get(ctx, bucket, "m/sub/empty", &b); err != nil || n != 0 {
			t.Fatalf("Get(empty) = %d, %v", n, err)
		}
	})
	t.Run("not found", func(t *testing.T) {
		for name, op := range map[string]func() error{
			"head":  func() error { _, err := s.Head(ctx, bucket, "m/missing"); return err },
			"range": func() error { return s.ReadRange(ctx, bucket, "m/missing", 0, make([]byte, 4)) },
			"get":   func() error { _, err := s.Get(ctx, bucket, "m/missing", &bytes.Buffer{}); return err },
		} {
			if err := op(); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("%s of a missing key: %v, want ErrNotFound", name, err)
			}
		}
	})
	t.Run("if-none-match", func(t *testing.T) {
		key := fmt.Sprintf("cas/%d", rng.Uint64())
		mustPut(t, key, []byte("first"), objstore.PutOptions{IfNoneMatch: true})
		err := objstore.PutBytes(ctx, s, bucket, key, []byte("second"), objstore.PutOptions{IfNoneMatch: true})
		if !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("second conditional put: %v, want ErrExists", err)
		}
		var b bytes.Buffer
		if _, err := s.Get(ctx, bucket, key, &b); err != nil || b.String() != "first" {
			t.Fatalf("after refused put: %q, %v; want the first content", b.String(), err)
		}
	})
	t.Run("stored checksum", func(t *testing.T) {
		for _, alg := range []string{"CRC32C", "CRC32", "SHA256", "CRC64NVME"} {
			t.Run(alg, func(t *testing.T) {
				key := "sum/" + alg
				mustPut(t, key, data[:1<<20], objstore.PutOptions{ChecksumAlgorithm: alg})
				ob, err := s.Head(ctx, bucket, key)
				if err != nil {
					t.Fatal(err)
				}
				h, _ := objstore.NewHash(alg)
				h.Write(data[:1<<20])
				if ob.Checksum.Algorithm != alg || ob.Checksum.Value != objstore.Encode(h.Sum(nil)) {
					t.Errorf("Head checksum %+v, want %s %s", ob.Checksum, alg, objstore.Encode(h.Sum(nil)))
				}
				parts, err := s.Parts(ctx, bucket, key)
				if err != nil || len(parts) > 1 {
					t.Errorf("Parts of a single-part object = %v, %v", parts, err)
				}
			})
		}
	})
}
