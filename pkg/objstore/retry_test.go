package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"warmd.io/warmd/pkg/objstore"
)

func TestRetry(t *testing.T) {
	fast := objstore.Backoff{Attempts: 5, Base: time.Millisecond, Max: 2 * time.Millisecond}
	for _, tc := range []struct {
		name      string
		failures  int
		err       error
		wantCalls int
		wantErr   bool
	}{
		{"short reads recover", 3, io.ErrUnexpectedEOF, 4, false},
		{"gives up after attempts", 10, io.ErrUnexpectedEOF, 5, true},
		{"not found is permanent", 10, objstore.ErrNotFound, 1, true},
		{"exists is permanent", 10, fmt.Errorf("put: %w", objstore.ErrExists), 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := objstore.NewMemory()
			if err := objstore.PutBytes(context.Background(), m, "b", "k", []byte("hello"), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			calls := 0
			m.Inject = func(string, string, string) error {
				calls++
				if calls <= tc.failures {
					return tc.err
				}
				return nil
			}
			buf := make([]byte, 5)
			err := fast.Do(context.Background(), func(int) error { return m.ReadRange(context.Background(), "b", "k", 0, buf) }, nil)
			if (err != nil) != tc.wantErr || calls != tc.wantCalls {
				t.Fatalf("err %v after %d calls; want error %v after %d", err, calls, tc.wantErr, tc.wantCalls)
			}
			if !tc.wantErr && string(buf) != "hello" {
				t.Fatalf("read %q", buf)
			}
		})
	}
	t.Run("delay is jittered and capped", func(t *testing.T) {
		b := objstore.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}
		for n := 1; n < 30; n++ {
			if d := b.Delay(n); d <= 0 || d > 50*time.Millisecond {
				t.Fatalf("Delay(%d) = %s outside (0, 50ms]", n, d)
			}
		}
	})
	t.Run("cancelled context stops", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := fast.Do(ctx, func(int) error { return io.ErrUnexpectedEOF }, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	})
}
