package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
)

// EnvBin names the dir holding the service binaries testbin.sh built (containerd, ctr, shim, ...).
const EnvBin = "WARMD_TEST_BIN"

// Daemon is a private containerd 2.4.2 a test starts for itself, when it must own the daemon: stop it,
// restart it, or give each simulated node its own.
type Daemon struct {
	Socket string
	dir    string
	bin    string
	cmd    *exec.Cmd
	t      testing.TB
}

// StartContainerd starts a private containerd 2.4.2 with its own config, root, state and socket under
// a short temp dir, and stops it when the test ends.
func StartContainerd(t testing.TB) *Daemon {
	t.Helper()
	bin := Require(t, EnvBin, "the test service binaries")
	dir, err := os.MkdirTemp("/tmp", "wdc-") // short: unix socket paths are limited to ~104 bytes
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{Socket: filepath.Join(dir, "sock"), dir: dir, bin: bin, t: t}
	cfg := fmt.Sprintf(`version = 3
root = "%[1]s/root"
state = "%[1]s/state"
[grpc]
  address = "%[1]s/sock"
[ttrpc]
  address = "%[1]s/sock.ttrpc"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
`, dir)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d.Start()
	t.Cleanup(func() {
		d.Stop()
		_ = exec.Command("sh", "-c", "grep -o ' "+dir+"[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l").Run()
		os.RemoveAll(dir)
	})
	return d
}

// Start (re)starts the daemon on the same root, state and socket and waits until it answers.
func (d *Daemon) Start() {
	d.t.Helper()
	log, err := os.OpenFile(filepath.Join(d.dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(d.bin, "containerd"), "--config", filepath.Join(d.dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "PATH="+d.bin+":"+os.Getenv("PATH"))
	if err := cmd.Start(); err != nil {
		d.t.Fatalf("start containerd: %v", err)
	}
	log.Close()
	d.cmd = cmd
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := containerd.New(d.Socket, containerd.WithTimeout(time.Second)); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, verr := c.Version(ctx)
			cancel()
			c.Close()
			if verr == nil {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, _ := os.ReadFile(filepath.Join(d.dir, "containerd.log"))
	d.t.Fatalf("containerd at %s did not come up:\n%s", d.Socket, out)
}

// Stop stops the daemon (SIGTERM, then SIGKILL after 10 s). Its data stays for a later Start.
func (d *Daemon) Stop() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
	d.cmd = nil
}
