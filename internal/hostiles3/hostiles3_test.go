package hostiles3_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"warmd.io/warmd/internal/hostiles3"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
)

func client(t *testing.T, s *hostiles3.Server) *objstore.S3 {
	t.Helper()
	st, err := objstore.NewS3(context.Background(), config.S3{Endpoint: s.Endpoint()}, objstore.Options{
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
		Backoff:     objstore.Backoff{Attempts: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The stub serves, through warmd's real S3 client, the names a real server refuses, byte for byte,
// in the order given, across continuation pages, with ranged reads and checksum headers.
func TestServesHostileKeysThroughTheRealClient(t *testing.T) {
	keys := []string{"m/../../escape", "m//abs", "m/a//b", "m/./x", "m/dir/", "m/a", "m/a/b", "m/a", "m/" + strings.Repeat("x", 300),
		"m/tab\there", "m/del\x7f", "m/c1\u0085", "m/back\\slash", "m/cr\rlf", "m/amp&<lt>"}
	var objs []hostiles3.Object
	for i, k := range keys {
		objs = append(objs, hostiles3.Object{Key: k, Data: []byte(fmt.Sprintf("object %d", i)), ChecksumAlgorithm: "CRC32C"})
	}
	s := hostiles3.New(t, "bkt", objs...)
	s.PageSize = 4
	c := client(t, s)
	ctx := context.Background()
	got, err := c.List(ctx, "bkt", "m/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range got {
		names = append(names, o.Key)
	}
	if !slices.Equal(names, keys) {
		t.Fatalf("listed %q\nwant   %q", names, keys)
	}
	for i, k := range keys {
		if k == "m/a" && i == 7 {
			continue // the duplicate: GET serves the first
		}
		h, err := c.Head(ctx, "bkt", k)
		if err != nil {
			t.Fatalf("head %q: %v", k, err)
		}
		want := objs[i].Data
		if h.Size != int64(len(want)) || h.Checksum.Algorithm != "CRC32C" || h.Checksum.Value == "" {
			t.Errorf("head %q: %+v", k, h)
		}
		var b bytes.Buffer
		if _, err := c.GetRange(ctx, "bkt", k, 2, 4, &b); err != nil || b.String() != string(want[2:6]) {
			t.Errorf("get %q bytes 2-5: %q, %v; want %q", k, b.String(), err, want[2:6])
		}
		if !s.Fetched(k) {
			t.Errorf("the stub did not record the GET of %q", k)
		}
	}
}

// Names XML cannot carry make the real client's listing fail rather than arrive changed.
func TestUnencodableKeysFailTheListing(t *testing.T) {
	for _, k := range []string{"m/nul\x00", "m/bell\x07", "m/bad\xffutf8"} {
		s := hostiles3.New(t, "bkt", hostiles3.Object{Key: k, Data: []byte("x")})
		objs, err := client(t, s).List(context.Background(), "bkt", "m/")
		if err == nil {
			t.Errorf("listing %q succeeded: %+v", k, objs)
		}
	}
}
