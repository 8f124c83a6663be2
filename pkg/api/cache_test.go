package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/state"
)

// fakeCache is a hand-written CacheService.
type fakeCache struct {
	got       string
	component string
	err       error
}

var _ CacheService = (*fakeCache)(nil)

func (f *fakeCache) ImportBundle(_ context.Context, r io.Reader, component string) (CacheImport, error) {
	b, _ := io.ReadAll(r)
	f.got, f.component = string(b), component
	if f.err != nil {
		return CacheImport{}, f.err
	}
	return CacheImport{SHA256: strings.Repeat("a", 64), Component: component, Entries: 3, Written: 2}, nil
}

func (f *fakeCache) SyncCache(_ context.Context, op string) (CacheSync, error) {
	if f.err != nil {
		return CacheSync{}, f.err
	}
	return CacheSync{Op: op, Restored: 1, Remote: 2}, nil
}

func serve(t *testing.T, c CacheService) *Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "api")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Store: state.New(time.Now), Log: slog.New(slog.DiscardHandler)}
	if c != nil {
		srv.Cache = c
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, srv.LocalHandler(), time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return NewClient(sock)
}

// TestCacheOperations: the bundle reaches the service whole with its component; refusals and a part
// that is not running come back as the sentinels the CLI branches on, with the daemon's message.
func TestCacheOperations(t *testing.T) {
	ctx := context.Background()
	f := &fakeCache{}
	c := serve(t, f)
	res, err := c.CacheImport(ctx, strings.NewReader("bundle bytes"), "triton")
	if err != nil || res.Written != 2 || f.got != "bundle bytes" || f.component != "triton" {
		t.Fatalf("import: %+v %v (service saw %q %q)", res, err, f.got, f.component)
	}
	if s, err := c.CacheSync(ctx, "pull"); err != nil || s.Op != "pull" || s.Restored != 1 {
		t.Fatalf("sync: %+v %v", s, err)
	}
	for _, tc := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("%w: corrupt bundle: tar entry 3 is a sparse file", ErrCacheRefused), ErrCacheRefused},
		{fmt.Errorf("%w: waiting for the GPU SKU", ErrCacheNotReady), ErrCacheNotReady},
		{errors.New("disk on fire"), nil},
	} {
		f.err = tc.err
		_, err := c.CacheImport(ctx, strings.NewReader("x"), "triton")
		if err == nil || !strings.Contains(err.Error(), tc.err.Error()) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("service error %v came back as %v", tc.err, err)
		}
		if tc.want == nil && (errors.Is(err, ErrCacheRefused) || errors.Is(err, ErrCacheNotReady)) {
			t.Errorf("a failure came back as a refusal: %v", err)
		}
	}
	if _, err := serve(t, nil).CacheSync(ctx, "push"); !errors.Is(err, ErrCacheNotReady) {
		t.Errorf("no cache part: %v, want ErrCacheNotReady", err)
	}
}
