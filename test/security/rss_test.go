package security

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A child's ru_maxrss counts the memory it shares with its parent until it execs (Go starts
// children with CLONE_VM, and the kernel carries the high-water mark across exec), so warmd started
// straight from this test process would report this process's RSS — hundreds of MiB under -race in
// `make test` — and no bound on warmd's own memory could fail. A bounded command therefore starts
// from a small parent: this test binary re-executed as a wrapper (rssWrapEnv set), which runs the
// command, writes the command's ru_maxrss (bytes) to the file rssWrapEnv names, and exits with its
// exit code. It passes SIGTERM and SIGINT on to the command.
const rssWrapEnv = "WARMD_SECURITY_RSS_FILE"

// rssWrapMain is the wrapper's main; TestMain calls it first. It returns false when this process
// is not a wrapper.
func rssWrapMain() bool {
	out := os.Getenv(rssWrapEnv)
	if out == "" {
		return false
	}
	n, err := strconv.Atoi(os.Getenv(rssArgcEnv))
	if err != nil || n < 1 || n >= len(os.Args) {
		fmt.Fprintln(os.Stderr, "rss wrapper: bad", rssArgcEnv)
		os.Exit(125)
	}
	args := os.Args[len(os.Args)-n:]
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = os.Environ()
	// Signals for the command (a test stopping a daemon) reach it through the wrapper.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "rss wrapper:", err)
		os.Exit(125)
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintln(os.Stderr, "rss wrapper:", err)
		os.Exit(125)
	}
	rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10 // KiB on Linux
	if err := os.WriteFile(out, []byte(strconv.FormatInt(rss, 10)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "rss wrapper:", err)
		os.Exit(125)
	}
	os.Exit(cmd.ProcessState.ExitCode())
	panic("unreachable")
}

// rssArgcEnv is how many of the wrapper's last arguments are the command (its name and args).
const rssArgcEnv = "WARMD_SECURITY_RSS_ARGC"

// rssCommand is exec.CommandContext(ctx, name, args...) through the wrapper; peak reads the
// command's peak RSS in bytes once it has exited.
func rssCommand(t *testing.T, ctx context.Context, name string, args ...string) (cmd *exec.Cmd, peak func() int64) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "maxrss")
	cmd = exec.CommandContext(ctx, self, append([]string{name}, args...)...)
	cmd.Env = append(os.Environ(), rssWrapEnv+"="+file, rssArgcEnv+"="+strconv.Itoa(len(args)+1))
	return cmd, func() int64 {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("peak RSS of %s %s: the wrapper wrote none (%v)", name, strings.Join(args, " "), err)
		}
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			t.Fatalf("peak RSS: %q", b)
		}
		return n
	}
}
