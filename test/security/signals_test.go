package security

// Class 7: one-shot commands ignored SIGTERM/SIGINT. `warmd phases` on an input that never ends (a
// pipe whose writer stays open, a FIFO nobody writes, /dev/zero) read on forever; the kubelet's
// SIGTERM, or an operator's Ctrl-C, did nothing. Every case starts the real binary, signals it once
// it is busy, and asserts that it exits within a second with 128+signal and leaves nothing partial
// (no half-printed table, no file under a final path).

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/internal/fixtures"
)

// stopWithin is how soon after a signal a command must have exited: promptly, not when its input
// or work ends (endless inputs never end). 3 s, not 1: on a loaded 2-core CI runner `warmd phases
// /dev/zero` once took 1.7 s to exit while test packages ran beside it.
const stopWithin = 3 * time.Second

// busy is a warmd process a case signals.
type busy struct {
	cmd      *exec.Cmd
	out, err *syncBuffer
	exited   chan struct{}
	waitErr  error
}

// startBusy starts warmd with args (stdin from in when non-nil) and returns at once.
func (w *World) startBusy(in io.Reader, args ...string) *busy {
	w.T.Helper()
	b := &busy{out: &syncBuffer{}, err: &syncBuffer{}, exited: make(chan struct{})}
	b.cmd = exec.Command(warmdBin, args...)
	b.cmd.Stdin, b.cmd.Stdout, b.cmd.Stderr = in, b.out, b.err
	b.cmd.Env = append(os.Environ(), w.Env...)
	b.cmd.Dir = w.Work
	if err := b.cmd.Start(); err != nil {
		w.T.Fatal(err)
	}
	go func() { b.waitErr = b.cmd.Wait(); close(b.exited) }()
	w.T.Cleanup(func() {
		select {
		case <-b.exited:
		default:
			b.cmd.Process.Kill()
			<-b.exited
		}
	})
	return b
}

// signal sends sig and returns the exit code once the process exits, failing the test (and killing
// it) if that takes longer than stopWithin.
func (b *busy) signal(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	select {
	case <-b.exited:
		t.Fatalf("warmd %s exited before the signal (%v):\n%s", strings.Join(b.cmd.Args[1:], " "), b.waitErr, b.err.String())
	default:
	}
	start := time.Now()
	if err := b.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.exited:
	case <-time.After(stopWithin + 2*time.Second): // wait a little longer to tell "slow" from "never"
		b.cmd.Process.Kill()
		<-b.exited
		t.Fatalf("warmd %s still running %s after %s (killed); stderr:\n%s",
			strings.Join(b.cmd.Args[1:], " "), time.Since(start).Round(time.Millisecond), sig, tail(b.err.String(), 2000))
	}
	took := time.Since(start)
	if took > stopWithin {
		t.Errorf("warmd %s took %s to stop after %s, want at most %s", strings.Join(b.cmd.Args[1:], " "), took.Round(time.Millisecond), sig, stopWithin)
	}
	var ee *exec.ExitError
	code := 0
	if errors.As(b.waitErr, &ee) {
		code = ee.ExitCode()
	} else if b.waitErr != nil {
		t.Fatal(b.waitErr)
	}
	t.Logf("stopped %s after %s with exit %d", took.Round(time.Millisecond), sig, code)
	return code
}

// vllmLines is an endless stream of vLLM log lines, one every 5 ms, until ctx ends.
type vllmLines struct {
	ctx context.Context
	n   int
	buf bytes.Buffer
}

func (v *vllmLines) Read(p []byte) (int, error) {
	if v.buf.Len() == 0 {
		select {
		case <-v.ctx.Done():
			return 0, io.EOF
		case <-time.After(5 * time.Millisecond):
		}
		v.n++
		fmt.Fprintf(&v.buf, "INFO 01-02 03:04:%02d [loader.py:%d] Loading weights took %d.5 seconds\n", v.n%60, v.n, v.n)
	}
	return v.buf.Read(p)
}

func TestSignalPhasesEndlessInput(t *testing.T) {
	fifo := func(t *testing.T, w *World) string {
		p := filepath.Join(w.Work, "fifo")
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		sig  syscall.Signal
		// args and stdin for the case
		setup func(t *testing.T, w *World, ctx context.Context) ([]string, io.Reader)
	}{
		{"stdin that never closes, SIGTERM", syscall.SIGTERM, func(t *testing.T, w *World, ctx context.Context) ([]string, io.Reader) {
			return []string{"phases", "-"}, &vllmLines{ctx: ctx}
		}},
		{"stdin that never writes, SIGINT", syscall.SIGINT, func(t *testing.T, w *World, ctx context.Context) ([]string, io.Reader) {
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pr.Close(); pw.Close() })
			return []string{"phases"}, pr
		}},
		{"/dev/zero, SIGINT", syscall.SIGINT, func(t *testing.T, w *World, ctx context.Context) ([]string, io.Reader) {
			return []string{"phases", "-o", "json", "/dev/zero"}, nil
		}},
		{"FIFO without a writer, SIGTERM", syscall.SIGTERM, func(t *testing.T, w *World, ctx context.Context) ([]string, io.Reader) {
			return []string{"phases", fifo(t, w)}, nil
		}},
		{"second file endless, SIGTERM", syscall.SIGTERM, func(t *testing.T, w *World, ctx context.Context) ([]string, io.Reader) {
			first := filepath.Join(w.Work, "first.log")
			if err := os.WriteFile(first, []byte("INFO 01-02 03:04:05 [api_server.py:1] vLLM API server version 0.11.0\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{"phases", "-o", "svg", first, "-"}, &vllmLines{ctx: ctx}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWorld(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			args, in := tc.setup(t, w, ctx)
			b := w.startBusy(in, args...)
			time.Sleep(500 * time.Millisecond) // well into its read loop
			code := b.signal(t, tc.sig)
			if want := 128 + int(tc.sig); code != want {
				t.Errorf("exit %d, want %d (128+%s)", code, want, tc.sig)
			}
			if out := b.out.String(); out != "" {
				t.Errorf("a stopped warmd phases printed a partial result:\n%s", tail(out, 500))
			}
			w.Check()
		})
	}
}

// TestSignalPrefetchWeights: a prefetch held back by its bandwidth cap (a slow link) stops within a
// second of SIGTERM, publishes nothing, and a rerun finishes the model.
func TestSignalPrefetchWeights(t *testing.T) {
	b := VersityBucket(t)
	m, err := fixtures.NewModel(fixtures.ModelSpec{Shards: 2, TensorsA: 4, BytesPerTensor: 4 << 20, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	b.PutModel("big/", m.Files)
	w := NewWorld(t)
	w.Env = append(w.Env, b.Env...)
	models := ModelsSection(map[string]string{"name": "sec/big", "source": b.URL("big/")})
	slow := w.Config(map[string]string{"s3": b.S3Section(), "models": models,
		"weights": "{bandwidthLimit: 1Mi, chunkSize: 1Mi, concurrency: 2}"})
	p := w.startBusy(nil, "prefetch", "weights", "--config", slow, "--progress", "plain")
	time.Sleep(1500 * time.Millisecond) // downloading at 1 MiB/s: 32 MiB would take half a minute
	if code := p.signal(t, syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	snaps := filepath.Join(w.DataDir, "weights", "models--sec--big", "snapshots")
	if ents, err := os.ReadDir(snaps); err == nil && len(ents) > 0 {
		t.Errorf("a stopped prefetch published %s/%s", snaps, ents[0].Name())
	}
	w.Check()
	fast := w.Config(map[string]string{"s3": b.S3Section(), "models": models})
	if r := w.Warmd("prefetch", "weights", "--config", fast, "--progress", "none"); r.Code != 0 {
		t.Fatalf("rerun after the signal: exit %d\n%s", r.Code, r.Output())
	}
	w.Check()
}

// TestSignalCacheImport: `warmd cache import` of a bundle that materialises 2 GiB stops within a
// second of SIGTERM (at whatever step it is: scanning, verifying or extracting), records nothing and
// leaves no file of the bundle in the SKU tree; a rerun imports it.
func TestSignalCacheImport(t *testing.T) {
	w := newCacheWorld(t)
	var entries []entry
	for i := range 8 {
		entries = append(entries, entry{name: fmt.Sprintf("KEY%02d/kernel.cubin", i), typ: tar.TypeReg, size: 256 << 20})
	}
	bundle, _ := hostileBundle(t, w.SKU, "triton", entries, nil)
	file := filepath.Join(w.Work, "bundles", "triton", "big.tar.zst")
	must(t, os.MkdirAll(filepath.Dir(file), 0o755))
	must(t, os.WriteFile(file, bundle, 0o644))
	args := []string{"cache", "import", "--data-dir", w.DataDir, "--sku", w.SKU, file}

	for _, after := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond} {
		p := w.startBusy(nil, args...)
		time.Sleep(after)
		select {
		case <-p.exited:
			t.Fatalf("the import of 2 GiB finished within %s; the case needs a slower one:\n%s", after, p.err.String())
		default:
		}
		if code := p.signal(t, syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
			t.Errorf("signalled after %s: exit %d, want %d\n%s", after, code, 128+int(syscall.SIGTERM), p.err.String())
		}
		if got := filesUnder(t, w.Tree("triton")); len(got) > 0 {
			t.Errorf("signalled after %s: the stopped import left %v in the SKU tree", after, got)
		}
		if out := w.Warmd("cache", "ls", "--data-dir", w.DataDir, "--sku", w.SKU, "-o", "json"); strings.Contains(out.Stdout, "KEY0") {
			t.Errorf("signalled after %s: the stopped import was recorded:\n%s", after, out.Stdout)
		}
	}
	if r := w.Warmd(args...); r.Code != 0 {
		t.Fatalf("rerun after the signals: exit %d\n%s", r.Code, r.Output())
	}
	if got := filesUnder(t, w.Tree("triton")); len(got) != len(entries) {
		t.Errorf("the rerun imported %d files, want %d", len(got), len(entries))
	}
	w.Check()
}

// filesUnder lists the regular files below dir (none if it does not exist).
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err == nil && de.Type().IsRegular() {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	return out
}

// TestSignalCacheExport: `warmd cache export` of a 2 GiB tree stops within a second of SIGINT and
// leaves no partial bundle in the export dir: each file there is a whole bundle, named by its own
// sha256 (Manager.Export commits each bundle whole, and keeps those done before the signal; on a
// fast machine the first is done within the 700 ms before it).
func TestSignalCacheExport(t *testing.T) {
	w := newCacheWorld(t)
	for i := range 8 {
		p := filepath.Join(w.Tree("triton"), fmt.Sprintf("KEY%02d", i), "kernel.cubin")
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		// Allocated but unwritten extents read as zeros: 2 GiB to pack, no data written. Not holes:
		// capture refuses a file that is mostly holes (docs/security.md, sparse files).
		must(t, unix.Fallocate(int(f.Fd()), 0, 0, 256<<20))
		f.Close()
	}
	out := filepath.Join(w.Work, "export")
	p := w.startBusy(nil, "cache", "export", "--data-dir", w.DataDir, "--sku", w.SKU, "--out", out)
	time.Sleep(700 * time.Millisecond)
	if code := p.signal(t, syscall.SIGINT); code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d, want %d\n%s", code, 128+int(syscall.SIGINT), p.err.String())
	}
	for _, f := range filesUnder(t, out) {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%x.tar.zst", sha256.Sum256(b)); filepath.Base(f) != want {
			t.Errorf("the stopped export left %s (%d bytes), not a whole bundle (its sha256 names it %s)", f, len(b), want)
		}
	}
	w.Check()
}
