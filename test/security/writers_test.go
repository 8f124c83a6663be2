package security

// Class 9: two writers on one data dir. A second `warmd run` with another socket ran beside the first,
// and CLI writers ran beside the daemon: both wrote the same staging dirs, journals, image store and
// records. The daemon now holds an flock on <dataDir>/warmd.lock (pkg/datadir) for its life; a second
// daemon exits at once naming the holder's pid and socket, and CLI writers take the same lock or go
// through the daemon.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSecondDaemonOnOneDataDirRefused(t *testing.T) {
	w := NewWorld(t)
	first := w.StartDaemon(w.Config(nil))

	// The same data dir, another socket (and its own listen port): what a second DaemonSet, a
	// rolling update with maxSurge or an operator's manual `warmd run` would do.
	otherSock := filepath.Join(filepath.Dir(w.Socket), "second.sock")
	cfg := w.Config(map[string]string{"api": fmt.Sprintf("{socket: %s, listen: '127.0.0.1:0'}", quoteYAML(otherSock))})
	second := w.startBusy(nil, "run", "--config", cfg, "--log-format", "text")
	select {
	case <-second.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("a second warmd run on the same data dir is still running after 10 s:\n%s", tail(second.err.String(), 2000))
	}
	if second.waitErr == nil {
		t.Fatalf("a second warmd run on the same data dir exited 0:\n%s", second.err.String())
	}
	for _, want := range []string{"in use by warmd run", fmt.Sprintf("pid %d", first.cmd.Process.Pid), w.Socket} {
		if !strings.Contains(second.err.String(), want) {
			t.Errorf("the second daemon's message lacks %q:\n%s", want, second.err.String())
		}
	}
	if _, err := os.Stat(otherSock); err == nil {
		t.Errorf("the second daemon created its socket %s", otherSock)
	}
	// The first daemon is untouched and still answers.
	first.Weights()
	first.Stop()
	w.Check()
}

// TestLockIsReleasedByAKilledDaemon: the lock is the kernel's, so a daemon killed with SIGKILL leaves
// nothing stale; the next one starts.
func TestLockIsReleasedByAKilledDaemon(t *testing.T) {
	w := NewWorld(t)
	cfg := w.Config(nil)
	d := w.StartDaemon(cfg)
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
	again := w.StartDaemon(cfg)
	again.Stop()
	w.Check()
}

// TestCLIImageWriterBesideTheDaemonRefused: `warmd prefetch images` with the embedded store would
// write the daemon's image store under it; it is refused, naming the daemon.
func TestCLIImageWriterBesideTheDaemonRefused(t *testing.T) {
	w := NewWorld(t)
	cfg := w.Config(map[string]string{"images": "[{ref: 127.0.0.1:1/nothing:here}]"})
	d := w.StartDaemon(cfg)
	r := w.Warmd("prefetch", "images", "--config", cfg, "--progress", "none")
	if r.Code == 0 || !strings.Contains(r.Output(), "in use by warmd run") || !strings.Contains(r.Output(), w.Socket) {
		t.Fatalf("prefetch images beside the daemon: exit %d, want refused naming the daemon:\n%s", r.Code, r.Output())
	}
	d.Stop()
	w.Check()
}
