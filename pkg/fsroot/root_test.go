package fsroot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/internal/canary"
	"warmd.io/warmd/internal/testenv"
)

func testRoot(t *testing.T) (*Root, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, dir
}

func TestWriteFileIsAtomicAndDurable(t *testing.T) {
	r, dir := testRoot(t)
	p := MustPath("state/weights/m.json")
	for _, content := range []string{"one", "two, longer"} {
		if err := r.WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, "state/weights/m.json"))
		if err != nil || string(got) != content {
			t.Fatalf("after WriteFile(%q): %q, %v", content, got, err)
		}
	}
	fi, _ := os.Stat(filepath.Join(dir, "state/weights/m.json"))
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode = %v, want 0640", fi.Mode().Perm())
	}
	es, _ := os.ReadDir(filepath.Join(dir, "state/weights"))
	if len(es) != 1 {
		t.Errorf("temp files left beside the committed one: %v", es)
	}
}

// TestNoLinkIsEverFollowed plants links where a pod would (an intermediate directory, the final
// name, a directory being removed) pointing at a canary outside the root, and checks every
// operation refuses or acts on the link itself.
func TestNoLinkIsEverFollowed(t *testing.T) {
	r, dir := testRoot(t)
	c := canary.New(t)
	must(t, os.MkdirAll(filepath.Join(dir, "cc/sku"), 0o755))
	must(t, os.Symlink(c.Path, filepath.Join(dir, "cc/sku/inductor")))                       // dir swapped for a link
	must(t, os.Symlink(filepath.Join(c.Path, "secret.txt"), filepath.Join(dir, "cc/sku/f"))) // file link
	must(t, os.MkdirAll(filepath.Join(dir, "cc/sku/evict/sub"), 0o755))
	must(t, os.Symlink(c.Path, filepath.Join(dir, "cc/sku/evict/sub/escape")))
	must(t, os.Symlink("../../../..", filepath.Join(dir, "cc/sku/evict/rel")))

	ops := map[string]func() error{
		"WriteFile through a dir link": func() error { return r.WriteFile(MustPath("cc/sku/inductor/x"), []byte("x"), 0o644) },
		"MkdirAll through a dir link":  func() error { return r.MkdirAll(MustPath("cc/sku/inductor/new"), 0o755) },
		"Open a file link":             func() error { _, err := r.Open(MustPath("cc/sku/f")); return err },
		"Open through a dir link":      func() error { _, err := r.Open(MustPath("cc/sku/inductor/secret.txt")); return err },
		"ReadFile a file link":         func() error { _, err := r.ReadFile(MustPath("cc/sku/f"), 1<<20); return err },
		"CreateTemp in a dir link":     func() error { _, err := r.CreateTemp(MustPath("cc/sku/inductor"), "t"); return err },
		"Remove through a dir link":    func() error { return r.Remove(MustPath("cc/sku/inductor/secret.txt")) },
		"RemoveAll through a dir link": func() error { return r.RemoveAll(MustPath("cc/sku/inductor/nested")) },
		"Rename out of a dir link": func() error {
			return r.Rename(MustPath("cc/sku/inductor/secret.txt"), MustPath("stolen"))
		},
		"Sub of a dir link":  func() error { _, err := r.Sub(MustPath("cc/sku/inductor")); return err },
		"ReadDir a dir link": func() error { _, err := r.ReadDir(MustPath("cc/sku/inductor")); return err },
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, ErrSymlink) {
			t.Errorf("%s: err = %v, want ErrSymlink", name, err)
		}
	}
	// Acting on a link itself is allowed and never reaches its target.
	if err := r.RemoveAll(MustPath("cc/sku/evict")); err != nil {
		t.Fatalf("RemoveAll of a tree holding links: %v", err)
	}
	if err := r.RemoveAll(MustPath("cc/sku/inductor")); err != nil {
		t.Fatalf("RemoveAll of a link: %v", err)
	}
	if err := r.WriteFile(MustPath("cc/sku/f"), []byte("replaced"), 0o644); err != nil {
		t.Fatalf("WriteFile over a link replaces the link: %v", err)
	}
	c.Check(t)
	if _, err := os.Lstat(filepath.Join(dir, "cc/sku/inductor")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("link not removed: %v", err)
	}
}

func TestSymlinkRefusesTargetsOutside(t *testing.T) {
	r, dir := testRoot(t)
	if err := r.Symlink("../../../../blobs/abc", MustPath("m/snapshots/main/config.json")); err == nil {
		t.Error("a target climbing out of the root was accepted")
	}
	if err := r.Symlink("/etc/passwd", MustPath("m/l")); err == nil {
		t.Error("an absolute target was accepted")
	}
	if err := r.Symlink("../../blobs/abc", MustPath("m/snapshots/config.json")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(filepath.Join(dir, "m/snapshots/config.json")); got != "../../blobs/abc" {
		t.Errorf("link target = %q", got)
	}
	if got, err := r.Readlink(MustPath("m/snapshots/config.json")); err != nil || got != "../../blobs/abc" {
		t.Errorf("Readlink = %q, %v", got, err)
	}
}

func TestOpenRefusesFIFOsWithoutBlocking(t *testing.T) {
	r, dir := testRoot(t)
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	done := make(chan error, 1)
	go func() { _, err := r.ReadFile(MustPath("fifo"), 10); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("ReadFile of a FIFO = %v, want ErrNotRegular", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFile of a FIFO blocked")
	}
}

// A device node planted in the tree is refused for every flag, without being opened.
func TestOpenRefusesDevices(t *testing.T) {
	r, dir := testRoot(t)
	if err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		testenv.Unavailable(t, "mknod needs root with CAP_MKNOD: "+err.Error())
	}
	for _, flag := range []int{os.O_RDONLY, os.O_WRONLY | os.O_TRUNC, os.O_RDWR | os.O_CREATE} {
		if f, err := r.OpenFile(MustPath("null"), flag, 0o644); !errors.Is(err, ErrNotRegular) {
			if f != nil {
				f.Close()
			}
			t.Errorf("OpenFile(device, %#x) = %v, want ErrNotRegular", flag, err)
		}
	}
	if _, err := r.ReadFile(MustPath("null"), 10); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadFile(device) = %v", err)
	}
}

func TestReadFileBound(t *testing.T) {
	r, _ := testRoot(t)
	must(t, r.WriteFile(MustPath("big"), make([]byte, 1000), 0o644))
	if _, err := r.ReadFile(MustPath("big"), 999); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadFile over the bound = %v, want ErrTooLarge", err)
	}
	if b, err := r.ReadFile(MustPath("big"), 1000); err != nil || len(b) != 1000 {
		t.Errorf("ReadFile at the bound = %d bytes, %v", len(b), err)
	}
}

func TestTempCommitNoReplaceAndExchange(t *testing.T) {
	r, dir := testRoot(t)
	tmp, err := r.CreateTemp(MustPath("blobs"), "abc")
	must(t, err)
	if !IsTemp(tmp.Path().Base()) {
		t.Errorf("%s is not recognised as a temp", tmp.Path())
	}
	tmp.WriteString("first")
	must(t, tmp.CommitNoReplace(MustPath("blobs/abc")))
	tmp2, err := r.CreateTemp(MustPath("blobs"), "abc")
	must(t, err)
	tmp2.WriteString("second")
	if err := tmp2.CommitNoReplace(MustPath("blobs/abc")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CommitNoReplace over an existing file = %v, want fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "blobs/abc")); string(got) != "first" {
		t.Errorf("content = %q, want first", got)
	}
	if n, _ := r.RemoveTemps(MustPath("blobs")); n != 0 {
		t.Errorf("a failed commit left %d temps", n)
	}
	abandoned, err := r.CreateTemp(MustPath("blobs"), "x")
	must(t, err)
	abandoned.Close() // a crash between create and commit
	if n, err := r.RemoveTemps(MustPath("blobs")); n != 1 || err != nil {
		t.Errorf("RemoveTemps = %d, %v, want 1", n, err)
	}

	must(t, r.WriteFile(MustPath("snap/a/f"), []byte("old"), 0o644))
	must(t, r.WriteFile(MustPath("stage/a/f"), []byte("new"), 0o644))
	must(t, r.Exchange(MustPath("stage/a"), MustPath("snap/a")))
	if got, _ := os.ReadFile(filepath.Join(dir, "snap/a/f")); string(got) != "new" {
		t.Errorf("after Exchange snap holds %q", got)
	}
	if err := r.RenameNoReplace(MustPath("stage/a"), MustPath("snap/a")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("RenameNoReplace onto a dir = %v, want fs.ErrExist", err)
	}
}

func TestWalkDirReportsLinksAndHostileNames(t *testing.T) {
	r, dir := testRoot(t)
	must(t, os.MkdirAll(filepath.Join(dir, "t/d/e"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "t/d/e/f"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "t/bad\nname"), nil, 0o644))
	must(t, os.Symlink("/", filepath.Join(dir, "t/d/root")))
	var seen []string
	var refused int
	err := r.WalkDir(MustPath("t"), func(p Path, d fs.DirEntry, err error) error {
		if err != nil {
			if !errors.Is(err, ErrUnsafePath) {
				t.Errorf("walk error %v", err)
			}
			refused++
			return nil
		}
		seen = append(seen, p.String()+":"+d.Type().String())
		return nil
	})
	must(t, err)
	want := []string{"t/d:d---------", "t/d/e:d---------", "t/d/e/f:----------", "t/d/root:L---------"}
	if len(seen) != len(want) || refused != 1 {
		t.Fatalf("walk saw %v (refused %d), want %v and 1 refused", seen, refused, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("walk[%d] = %s, want %s", i, seen[i], want[i])
		}
	}
}

func TestSubIsConfined(t *testing.T) {
	r, dir := testRoot(t)
	sub, err := r.Sub(MustPath("compile-cache/sku"))
	must(t, err)
	defer sub.Close()
	must(t, sub.WriteFile(MustPath("vllm/x"), []byte("x"), 0o644))
	if _, err := os.Stat(filepath.Join(dir, "compile-cache/sku/vllm/x")); err != nil {
		t.Fatal(err)
	}
	if sub.Dir() != filepath.Join(dir, "compile-cache/sku") {
		t.Errorf("Sub.Dir = %s", sub.Dir())
	}
}

// TestNoMountIsCrossed mounts a tmpfs below the root: walking into it is refused (a Root stays on its
// filesystem), while a Root opened at the mount itself works.
func TestNoMountIsCrossed(t *testing.T) {
	r, dir := testRoot(t)
	mnt := filepath.Join(dir, "mnt")
	must(t, os.MkdirAll(mnt, 0o755))
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		testenv.Unavailable(t, "mounting a tmpfs needs root (CAP_SYS_ADMIN): "+err.Error())
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	if err := r.WriteFile(MustPath("mnt/x"), nil, 0o644); !errors.Is(err, ErrCrossDevice) {
		t.Errorf("WriteFile into a mount = %v, want ErrCrossDevice", err)
	}
	if err := r.RemoveAll(MustPath("mnt")); err == nil {
		t.Error("RemoveAll descended into a mount")
	}
	m, err := Open(mnt)
	must(t, err)
	defer m.Close()
	must(t, m.WriteFile(MustPath("x"), nil, 0o644))
}

// TestSwapRace swaps a directory for a link to a canary outside the root as fast as it can, while
// writes, walks and removals run through the directory. Whatever interleaving happens, nothing
// outside changes.
func TestSwapRace(t *testing.T) {
	r, dir := testRoot(t)
	c := canary.New(t)
	target := filepath.Join(dir, "tree/comp")
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load() && i < 200000; i++ {
			os.RemoveAll(target)
			if i%2 == 0 {
				os.MkdirAll(filepath.Join(target, "entry"), 0o755)
				os.WriteFile(filepath.Join(target, "entry/f"), []byte("pod"), 0o644)
				if i%64 == 0 {
					// Now and then the dir stays a dir for a moment: an fsynced write takes
					// longer than a swap, so without these windows (almost) every write fails
					// and the test would show only that refusing is safe.
					time.Sleep(3 * time.Millisecond)
				}
			} else {
				os.Symlink(c.Path, target)
			}
		}
	}()
	// ok counts, per kind of operation, the calls that succeeded: a root that refused everything
	// would also leave the canary alone, so each kind must have gone through sometimes (when the
	// directory was a directory), or the race never ran.
	ok := map[string]int{}
	count := func(op string, err error) {
		if err == nil {
			ok[op]++
		} else if ok[op+"-err"]++; ok[op+"-err"] < 3 {
			t.Log(op, err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		count("write", r.WriteFile(MustPath("tree/comp/entry/f"), []byte("warmd"), 0o644))
		count("write", r.WriteFile(MustPath("tree/comp/secret.txt"), []byte("warmd"), 0o644))
		count("removeall", r.RemoveAll(MustPath("tree/comp/entry")))
		r.RemoveAll(MustPath("tree/comp/nested"))
		r.Remove(MustPath("tree/comp/etc/passwd")) // never exists: an error every time
		removed := 0
		count("walk", r.WalkDir(MustPath("tree"), func(p Path, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && r.Remove(p) == nil {
				removed++
			}
			return nil
		}))
		if removed > 0 {
			ok["remove"]++
		}
	}
	stop.Store(true)
	wg.Wait()
	c.Check(t)
	for _, op := range []string{"write", "removeall", "walk", "remove"} {
		if ok[op] == 0 {
			t.Errorf("no %s succeeded in 2 s of swaps (successes: %v): the race never reached a directory", op, ok)
		}
	}
	t.Logf("successes under the swaps: %v", ok)
}

func TestOpenRequiresAbsoluteDir(t *testing.T) {
	if _, err := Open("relative/dir"); err == nil {
		t.Error("Open accepted a relative dir")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRemoveTempsOfTouchesOnlyThatName: in a directory several writers share, the sweep of one
// file's temps leaves the others' temps and every published file alone.
func TestRemoveTempsOfTouchesOnlyThatName(t *testing.T) {
	t.Parallel()
	r, _ := testRoot(t)
	must(t, r.WriteFile(MustPath("state/a"), []byte("a"), 0o644))
	must(t, r.WriteFile(MustPath("state/ab"), []byte("ab"), 0o644))
	for _, name := range []string{"a", "a", "ab"} {
		tmp, err := r.CreateTemp(MustPath("state"), name)
		must(t, err)
		tmp.Close() // a crash between create and commit
	}
	if n, err := r.RemoveTempsOf(MustPath("state/a")); n != 2 || err != nil {
		t.Errorf("RemoveTempsOf(state/a) = %d, %v, want 2", n, err)
	}
	es, _ := r.ReadDir(MustPath("state"))
	var left []string
	for _, e := range es {
		left = append(left, e.Name())
	}
	if len(left) != 3 || !strings.HasPrefix(left[0], ".ab.warmd-tmp-") || left[1] != "a" || left[2] != "ab" {
		t.Errorf("left %q, want ab's temp, a and ab", left)
	}
	if n, err := r.RemoveTempsOf(MustPath("missing/x")); n != 0 || err != nil {
		t.Errorf("RemoveTempsOf in a missing dir = %d, %v", n, err)
	}
}
