package weights_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
)

// fakeClock is an injected clock tests advance by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestBudgetEviction(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	models := map[string]fakeModel{}
	for i, name := range []string{"a", "b", "c", "d"} {
		m := newFakeModel(uint64(10+i), 2<<20, 1<<20)
		m.writeDir(t, filepath.Join(src, name))
		models["acme/"+name] = m
	}
	size := models["acme/a"].size()
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	inUse := map[string]bool{}
	var mu sync.Mutex
	data := t.TempDir()
	e := newEngine(t, data, func(o *weights.Options) {
		o.Budget = 2*size + size/2 // room for two models
		o.Now = clock.Now
		o.InUseWindow = 10 * time.Minute
		o.InUse = func(m string) bool { mu.Lock(); defer mu.Unlock(); return inUse[m] }
	})
	fetch := func(name string) error {
		_, err := e.Fetch(context.Background(), fileModel("acme/"+name, filepath.Join(src, name)), nil)
		clock.Add(time.Minute)
		return err
	}
	published := func(name string) bool {
		_, err := os.Stat(e.SnapshotPath("acme/"+name, "main"))
		return err == nil
	}
	for _, n := range []string{"a", "b"} {
		if err := fetch(n); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("recently used models are in use", func(t *testing.T) {
		err := fetch("c")
		if !errors.Is(err, weights.ErrBudget) || !strings.Contains(err.Error(), "acme/a") {
			t.Fatalf("err = %v; want ErrBudget naming the in-use models", err)
		}
		if !published("a") || !published("b") || published("c") {
			t.Fatal("a failed fetch must leave the other models alone")
		}
	})
	clock.Add(time.Hour) // a and b leave the in-use window
	t.Run("evicts the LRU model no pod uses", func(t *testing.T) {
		mu.Lock()
		inUse["acme/a"] = true // a is least recently used but a pod runs it
		mu.Unlock()
		if err := fetch("c"); err != nil {
			t.Fatal(err)
		}
		if !published("a") || published("b") || !published("c") {
			t.Fatalf("published a=%v b=%v c=%v; want b evicted, a kept (in use)", published("a"), published("b"), published("c"))
		}
		if e.UsedBytes() > 2*size+size/2 {
			t.Errorf("used %d bytes over the budget", e.UsedBytes())
		}
	})
	t.Run("fails when only models in use remain", func(t *testing.T) {
		mu.Lock()
		inUse["acme/c"] = true
		mu.Unlock()
		clock.Add(time.Hour)
		if err := fetch("d"); !errors.Is(err, weights.ErrBudget) {
			t.Fatalf("err = %v; want ErrBudget", err)
		}
		if !published("a") || !published("c") || published("d") {
			t.Fatal("in-use models must never be evicted")
		}
	})
}

func TestDiskFull(t *testing.T) {
	t.Parallel()
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=6m"); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("cannot mount a tmpfs to fill (run as root, as `make test` in CI does, or with CAP_SYS_ADMIN): %v", err))
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	src := t.TempDir()
	m := newFakeModel(20, 5<<20, 3<<20)
	m.writeDir(t, src)
	e := newEngine(t, mnt, nil)
	st, err := e.Fetch(context.Background(), fileModel("acme/big", src), nil)
	if !errors.Is(err, weights.ErrDiskFull) {
		t.Fatalf("err = %v; want ErrDiskFull", err)
	}
	if st.State != prefetch.StateFailed || !strings.Contains(st.Reason, "disk full") {
		t.Errorf("status %+v; want failed with the reason", st)
	}
	if ents, _ := os.ReadDir(filepath.Join(mnt, "weights", ".staging")); len(ents) != 0 {
		t.Errorf("staging not cleaned: %v", ents)
	}
	if _, err := os.Stat(e.ModelDir("acme/big")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("something was published: %v", err)
	}
	// The space is back: a model that fits goes through on the same disk.
	small := newFakeModel(21, 1<<20)
	sdir := t.TempDir()
	small.writeDir(t, sdir)
	if _, err := e.Fetch(context.Background(), fileModel("acme/small", sdir), nil); err != nil {
		out, _ := exec.Command("df", "-h", mnt).CombinedOutput()
		t.Fatalf("after a disk-full failure: %v\n%s", err, out)
	}
}

// TestBandwidthCap measures elapsed time, so it runs alone (no t.Parallel).
func TestBandwidthCap(t *testing.T) {
	src := t.TempDir()
	m := newFakeModel(30, 5<<20+17, 2<<20)
	m.writeDir(t, src)
	const limit = 8 << 20
	e := newEngine(t, t.TempDir(), func(o *weights.Options) { o.BandwidthLimit = limit })
	if _, err := e.Fetch(context.Background(), fileModel("acme/capped", src), nil); err != nil {
		t.Fatal(err)
	}
	admitted, delayed := e.BandwidthAccounting()
	if admitted != m.size() {
		t.Errorf("limiter admitted %d bytes, the model has %d: some bytes bypassed the cap", admitted, m.size())
	}
	// With a 1 MiB burst, the limiter must have held the download back by at least the time the
	// bytes beyond the burst take at the cap (its own accounting, not wall time).
	minDelay := time.Duration(float64(m.size()-(1<<20)) / limit * float64(time.Second))
	if delayed < minDelay*9/10 {
		t.Errorf("limiter delayed %s in total; at %d B/s it must delay at least %s", delayed, limit, minDelay)
	}
}
