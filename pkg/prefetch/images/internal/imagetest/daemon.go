package imagetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"warmd.io/warmd/internal/testenv"
)

// Daemon is a private containerd a test may kill and restart.
type Daemon struct {
	Socket  string
	bin     string
	cfgPath string
	dir     string
	cmd     *exec.Cmd
	log     *os.File
}

// StartDaemon starts a private containerd of the given major version ("2" = the testbin 2.4.2
// build, "1" = Debian's 1.6.20) under its own short temp dir, stopped when the test ends.
func StartDaemon(t testing.TB, major string) *Daemon {
	t.Helper()
	var bin, cfg string
	dir, err := os.MkdirTemp("/tmp", "wimg-") // short: unix socket paths must stay under 104 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "sock")
	switch major {
	case "2":
		bin = filepath.Join(testenv.Assets(t), "containerd")
		cfg = fmt.Sprintf("version = 3\nroot = %q\nstate = %q\n[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n",
			filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	case "1":
		testenv.Containerd16(t) // the shared 1.6 daemon proves the Debian package is installed
		bin = "/usr/bin/containerd"
		cfg = fmt.Sprintf("version = 2\nroot = %q\nstate = %q\n[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n",
			filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	default:
		t.Fatalf("containerd major %q: want 1 or 2", major)
	}
	d := &Daemon{Socket: sock, bin: bin, dir: dir, cfgPath: filepath.Join(dir, "config.toml")}
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Kill)
	d.Start(t)
	return d
}

// Start (re)starts the daemon and waits for its socket.
func (d *Daemon) Start(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(d.dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	d.log = f
	d.cmd = exec.Command(d.bin, "--config", d.cfgPath)
	d.cmd.Stdout, d.cmd.Stderr = f, f
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", d.bin, err)
	}
	for i := 0; i < 300; i++ { // bounded: 30 s
		if _, err := os.Stat(d.Socket); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(d.dir, "log"))
	t.Fatalf("containerd did not create %s in 30s; log:\n%s", d.Socket, log)
}

// Kill stops the daemon with SIGKILL (as a crash would) and waits for it.
func (d *Daemon) Kill() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
	d.cmd = nil
	d.log.Close()
	os.Remove(d.Socket)
}
