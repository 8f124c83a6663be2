package datadir

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary hold a lock in a child process, so the tests check the lock between
// real processes (flock is per open file, but a second process is what the daemon meets in practice).
func TestMain(m *testing.M) {
	if dir := os.Getenv("DATADIR_TEST_HOLD"); dir != "" {
		l, err := Acquire(dir, Holder{Command: "warmd run", Socket: filepath.Join(dir, "warmd.sock")})
		if err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(3)
		}
		os.Stdout.WriteString("locked\n")
		time.Sleep(time.Minute) // until the test kills it
		l.Release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func holdInChild(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DATADIR_TEST_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("child did not lock: %q %v", buf, err)
	}
	return cmd
}

func TestSecondWriterIsRefusedNamingTheHolder(t *testing.T) {
	dir := t.TempDir()
	child := holdInChild(t, dir)

	_, err := Acquire(dir, Holder{Command: "warmd cache import"})
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) {
		t.Fatalf("second Acquire: %v, want a *LockedError", err)
	}
	if !le.HolderKnown || le.Holder.PID != child.Process.Pid || le.Holder.Command != "warmd run" {
		t.Fatalf("holder = %+v (known %v), want pid %d warmd run", le.Holder, le.HolderKnown, child.Process.Pid)
	}
	msg := err.Error()
	for _, want := range []string{dir, "warmd run", "pid ", filepath.Join(dir, "warmd.sock"), "only one warmd"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	h, ok, err := Held(dir)
	if err != nil || !ok || h.PID != child.Process.Pid {
		t.Fatalf("Held = %+v %v %v", h, ok, err)
	}

	// The kernel drops an flock when its holder dies, even on SIGKILL: no stale lock.
	child.Process.Kill()
	child.Wait()
	l, err := Acquire(dir, Holder{Command: "warmd run"})
	if err != nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	if _, ok, _ := Held(dir); !ok {
		t.Error("Held says free while this process holds it")
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := Held(dir); ok {
		t.Error("Held says held after Release")
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
}

func TestSameProcessSecondAcquireIsRefused(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir, Holder{Command: "warmd run", Socket: "/x.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if _, err := Acquire(dir, Holder{Command: "warmd run"}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Acquire in the same process: %v", err)
	}
}

func TestLockFileSymlinkIsNotFollowed(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, LockFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(dir, Holder{Command: "warmd run"}); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("Acquire through a symlinked lock file: %v", err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep me" {
		t.Fatalf("the link's target changed: %q", b)
	}
}

func TestTamperedHolderRecordIsCleaned(t *testing.T) {
	for _, tc := range []struct{ name, content string }{
		{"control characters", `{"pid":7,"command":"warmd run\u001b[31m\nFAKE","socket":"/s"}`},
		{"garbage", "not json at all"},
		{"oversized", `{"pid":7,"command":"` + strings.Repeat("x", 2*maxHolderBytes) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, LockFile)
			if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := openLockFile(dir, os.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			h, ok := readHolder(f)
			if ok && strings.ContainsAny(h.Command+h.Socket+h.Host, "\x1b\n") {
				t.Fatalf("control characters kept: %+v", h)
			}
			if ok && len(h.Command) > 256 {
				t.Fatalf("command not capped: %d bytes", len(h.Command))
			}
			if tc.name != "control characters" && ok {
				t.Fatalf("%s read as a holder: %+v", tc.name, h)
			}
		})
	}
}

func TestRelativeDirIsRefused(t *testing.T) {
	if _, err := Acquire("var/lib/warmd", Holder{}); err == nil {
		t.Fatal("relative dir accepted")
	}
}
