package s3

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
)

func put(t *testing.T, st objstore.Store, key, data string) {
	t.Helper()
	if err := objstore.PutBytes(context.Background(), st, "b", key, []byte(data), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Keys a real server would refuse (NUL, C0 controls, invalid UTF-8) reach the source through the
// in-memory store: each is refused by name, quoted, before anything is fetched.
func TestListRefusesHostileKeys(t *testing.T) {
	for _, key := range []string{"m/nul\x00", "m/bell\x07x", "m/bad\xff", "m/../x", "m//abs", "m/a/./b", "m/" + strings.Repeat("z", 300)} {
		st := objstore.NewMemory()
		put(t, st, "m/config.json", "{}")
		put(t, st, key, "hostile")
		src, err := New(st, "s3://b/m/")
		if err != nil {
			t.Fatal(err)
		}
		_, err = src.List(context.Background())
		if !errors.Is(err, fsroot.ErrUnsafePath) || !strings.Contains(err.Error(), "rename or delete those objects in the bucket") {
			t.Errorf("%q: %v; want a refusal naming the fix", key, err)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\x00\x07\xff") {
			t.Errorf("%q: error carries the raw key: %q", key, err)
		}
	}
}

func TestListSkipsFolderMarkersOnly(t *testing.T) {
	st := objstore.NewMemory()
	put(t, st, "m/", "")
	put(t, st, "m/sub/", "")
	put(t, st, "m/sub/config.json", "{}")
	src, _ := New(st, "s3://b/m")
	l, err := src.List(context.Background())
	if err != nil || len(l.Files) != 1 || l.Files[0].Name.String() != "sub/config.json" {
		t.Fatalf("listing %+v, %v; want only sub/config.json", l, err)
	}
	var b bytes.Buffer
	if _, err := src.GetRange(context.Background(), l.Files[0].Name, 0, 2, &b); err != nil || b.String() != "{}" {
		t.Errorf("get %q %v", b.String(), err)
	}
	put(t, st, "m/full/", "not a marker")
	if _, err := src.List(context.Background()); err == nil || !strings.Contains(err.Error(), `ends with "/" but holds 12 bytes`) {
		t.Errorf("a non-empty key ending in / was accepted: %v", err)
	}
}
