// Package datadir guards a warmd data dir against two writers. The daemon holds an exclusive flock on
// <dataDir>/warmd.lock for its whole life; a CLI command that writes under the data dir (`warmd
// prefetch`, `warmd cache import`) takes the same lock when no daemon runs, and otherwise goes through
// the daemon or refuses. Two writers would race on the same staging dirs, journals and bundle records
// (a bundle imported while the daemon watches the tree is captured a second time as the daemon's own).
//
// The lock is an flock(2) on an open file, so the kernel drops it when the holder exits, even on
// SIGKILL: there is no stale lock to clean up. The file also records who holds it (pid, command,
// socket, host, start time) so the loser can say whom to stop. The file is never removed: removing a
// lock file lets a third process lock a new inode while the first still holds the old one.
//
// It does not own the data dir's layout or anything else in it.
package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// LockFile is the lock's name inside the data dir.
const LockFile = "warmd.lock"

// maxHolderBytes bounds what is read back from a lock file: it is ours, but the data dir may have been
// tampered with, and a reader must not be made to allocate whatever is there.
const maxHolderBytes = 4096

// ErrLocked is what errors.Is matches when another process holds the data dir.
var ErrLocked = errors.New("data dir is in use by another warmd")

// Holder says who holds a data dir.
type Holder struct {
	// PID is the holder's process id (in its own pid namespace: another pod's pid is not this pod's).
	PID int `json:"pid"`
	// Command is what holds it: "warmd run", "warmd cache import", ...
	Command string `json:"command"`
	// Socket is the daemon's local API socket; empty for CLI commands.
	Socket string `json:"socket,omitempty"`
	// Host is the holder's host name (a pod's name inside a pod).
	Host string `json:"host,omitempty"`
	// Since is when it took the lock.
	Since time.Time `json:"since"`
}

// Describe renders the holder for a message, e.g. `warmd run (pid 1234 on node-a, socket
// /var/lib/warmd/warmd.sock, since 2026-01-02T03:04:05Z)`.
func (h Holder) Describe() string {
	cmd := h.Command
	if cmd == "" {
		cmd = "a warmd process"
	}
	parts := []string{fmt.Sprintf("pid %d", h.PID)}
	if h.Host != "" {
		parts[0] += " on " + h.Host
	}
	if h.Socket != "" {
		parts = append(parts, "socket "+h.Socket)
	}
	if !h.Since.IsZero() {
		parts = append(parts, "since "+h.Since.UTC().Format(time.RFC3339))
	}
	return cmd + " (" + strings.Join(parts, ", ") + ")"
}

// LockedError is returned when the data dir is held. Holder is zero when the holder had not yet
// written its name (or the file was unreadable); HolderKnown says which.
type LockedError struct {
	Dir         string
	Holder      Holder
	HolderKnown bool
}

func (e *LockedError) Error() string {
	who := "another warmd process"
	if e.HolderKnown {
		who = e.Holder.Describe()
	}
	return fmt.Sprintf("data dir %s is in use by %s: only one warmd may write a data dir; stop it, "+
		"run this through it, or give this one another dataDir", e.Dir, who)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Lock is a held data-dir lock. Release it (or exit) to let the next writer in.
type Lock struct {
	f   *os.File
	dir string
}

// Acquire takes the data dir's lock without waiting and records h as the holder (PID, Host and Since
// are filled in when zero). dir must be absolute; it is created (0o755) if missing. When another
// process holds it the error is a *LockedError naming that holder.
func Acquire(dir string, h Holder) (*Lock, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("lock data dir %q: not an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	f, err := openLockFile(dir, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, lockedError(dir)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	if h.PID == 0 {
		h.PID = os.Getpid()
	}
	if h.Host == "" {
		h.Host, _ = os.Hostname()
	}
	if h.Since.IsZero() {
		h.Since = time.Now().UTC()
	}
	if err := writeHolder(f, h); err != nil {
		f.Close() // closing drops the flock
		return nil, fmt.Errorf("lock data dir %s: record holder: %w", dir, err)
	}
	return &Lock{f: f, dir: dir}, nil
}

// Dir is the locked data dir.
func (l *Lock) Dir() string { return l.dir }

// Release clears the holder record and drops the lock. It is safe to call more than once.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	_ = f.Truncate(0) // a reader between now and Close sees "holder unknown", never a stale name
	return f.Close()
}

// Held reports who holds dir's lock now, without taking it: ok is false when nobody does. A CLI writer
// uses it to decide between going through the daemon and taking the lock itself; Acquire remains the
// only race-free test.
func Held(dir string) (h Holder, ok bool, err error) {
	f, err := openLockFile(dir, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, err
	}
	defer f.Close()
	// A shared lock succeeds only when nobody holds the exclusive one.
	if err := flock(f, unix.LOCK_SH|unix.LOCK_NB); err == nil {
		_ = flock(f, unix.LOCK_UN)
		return Holder{}, false, nil
	} else if !errors.Is(err, unix.EWOULDBLOCK) {
		return Holder{}, false, fmt.Errorf("probe data dir lock %s: %w", dir, err)
	}
	h, _ = readHolder(f)
	return h, true, nil
}

// lockedError reads the holder back for the message. The holder writes its record right after
// taking the lock, so an empty file is retried briefly before reporting the holder as unknown.
func lockedError(dir string) error {
	e := &LockedError{Dir: dir}
	for i := 0; i < 10; i++ {
		f, err := openLockFile(dir, os.O_RDONLY)
		if err != nil {
			break
		}
		h, ok := readHolder(f)
		f.Close()
		if ok {
			e.Holder, e.HolderKnown = h, true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return e
}

// openLockFile opens <dir>/warmd.lock without following a symlink: a link planted there must not make
// root create or truncate a file elsewhere.
func openLockFile(dir string, flag int) (*os.File, error) {
	p := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(p, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("lock file %s is a symlink; remove it (warmd creates a plain file)", p)
		}
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("lock file %s is not a regular file; remove it", p)
	}
	return f, nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func writeHolder(f *os.File, h Holder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt(append(b, '\n'), 0)
	return err
}

// readHolder decodes a holder record; ok is false for an empty, oversized or garbled file. Only the
// typed fields are kept, and strings are cleaned, so a tampered file cannot put arbitrary text into
// the loser's message.
func readHolder(f *os.File) (Holder, bool) {
	b, err := io.ReadAll(io.LimitReader(f, maxHolderBytes+1))
	if err != nil || len(b) == 0 || len(b) > maxHolderBytes {
		return Holder{}, false
	}
	var h Holder
	if json.Unmarshal(b, &h) != nil || h.PID <= 0 {
		return Holder{}, false
	}
	h.Command, h.Socket, h.Host = clean(h.Command), clean(h.Socket), clean(h.Host)
	return h, true
}

// clean keeps printable characters and caps the length.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return -1
		}
		return r
	}, s)
	if len(s) > 256 {
		s = strings.ToValidUTF8(s[:256], "")
	}
	return s
}
