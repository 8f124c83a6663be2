package security

// The harness every case file uses. A case is:
//
//	w := NewWorld(t)                          // data dir + canary beside it
//	b := StubBucket(t) / VersityBucket(t)     // where the hostile objects live
//	b.PutModel("m/", SmallModel(t))           // plus the hostile key or bytes under test
//	cfg := w.Config(map[string]string{"s3": b.S3Section(), "models": "[...]"})
//	w.Env = append(w.Env, b.Env...)
//	d := w.StartDaemon(cfg)                   // `warmd run`, stopped (SIGTERM, exit 0) at cleanup
//	st := d.WaitModels(time.Minute, "org/x")  // ready or failed
//	r := w.Warmd("prefetch", "weights", "--config", cfg)  // the CLI path
//	w.Check()                                 // canary identical, nothing new beside the data dir
//
// Everything runs the real binary TestMain built; nothing here calls warmd's packages to do the work.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"warmd.io/warmd/internal/canary"
	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/internal/hostiles3"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
)

// World is one case's filesystem: Dir holds warmd's data dir, the canary and the harness's own work
// dir side by side, so a name that climbs out of the data dir with ".." lands in the canary.
type World struct {
	T *testing.T
	// Dir is the parent of DataDir, Canary.Path and Work.
	Dir string
	// DataDir is warmd's data dir (Dir/data). Everything warmd writes must stay under it.
	DataDir string
	// Work (Dir/work) holds configs, pod log dirs and CLI target dirs. Check does not inspect it.
	Work string
	// Canary is Dir/canary; Check asserts it is byte-identical to how it was built.
	Canary *canary.Dir
	// Socket is the daemon's API socket, in a short dir of its own (unix socket paths are limited
	// to ~104 bytes and t.TempDir paths are long).
	Socket string
	// Env is added to every warmd process's environment (S3 credentials, ...).
	Env []string
	// Allowed lists further names a case expects beside the data dir (e.g. a CLI target dir).
	Allowed []string
}

// NewWorld builds a world with a fresh canary.
func NewWorld(t *testing.T) *World {
	t.Helper()
	c := canary.New(t)
	dir := filepath.Dir(c.Path)
	sock, err := os.MkdirTemp("", "sec")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	w := &World{T: t, Dir: dir, DataDir: filepath.Join(dir, "data"), Work: filepath.Join(dir, "work"), Canary: c,
		Socket: filepath.Join(sock, "warmd.sock")}
	for _, d := range []string{w.DataDir, w.Work, filepath.Join(w.Work, "pods")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// Check fails the test if the canary changed or anything but data, canary, work (and Allowed)
// appeared in Dir.
func (w *World) Check() {
	w.T.Helper()
	w.check(w.T)
}

func (w *World) check(t testing.TB) {
	t.Helper()
	w.Canary.Check(t)
	ents, err := os.ReadDir(w.Dir)
	if err != nil {
		t.Fatalf("read %s: %v", w.Dir, err)
	}
	allowed := append([]string{"data", "canary", "work"}, w.Allowed...)
	for _, e := range ents {
		if !slices.Contains(allowed, e.Name()) {
			t.Errorf("warmd created %s beside its data dir", filepath.Join(w.Dir, e.Name()))
		}
	}
}

// Config writes a NodeConfig and returns its path. sections are top-level keys with YAML values
// (flow style is easiest: "{endpoint: http://...}", "[{name: a, source: ...}]"); they replace the
// defaults: nodeName, dataDir, api (socket, listen on 127.0.0.1:0), containerd (embedded backend),
// compileCache (disabled), readiness (disabled), phases (podLogDir Work/pods).
func (w *World) Config(sections map[string]string) string {
	w.T.Helper()
	all := map[string]string{
		"nodeName":     "sec-node",
		"dataDir":      quoteYAML(w.DataDir),
		"api":          fmt.Sprintf("{socket: %s, listen: '127.0.0.1:0'}", quoteYAML(w.Socket)),
		"containerd":   "{backend: embedded}",
		"compileCache": "{disabled: true}",
		"readiness":    "{disabled: true}",
		"phases":       fmt.Sprintf("{podLogDir: %s}", quoteYAML(filepath.Join(w.Work, "pods"))),
	}
	for k, v := range sections {
		all[k] = v
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, all[k])
	}
	p := filepath.Join(w.Work, fmt.Sprintf("config-%d.yaml", rand.Uint32()))
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		w.T.Fatal(err)
	}
	return p
}

// quoteYAML quotes s as a YAML (JSON) string.
func quoteYAML(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Result is what a finished warmd CLI command did.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Output is stdout and stderr together, for assertions on what the user sees.
func (r Result) Output() string { return r.Stdout + r.Stderr }

// Warmd runs one warmd CLI command (two minutes at most) and returns what it did.
func (w *World) Warmd(args ...string) Result {
	w.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, warmdBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), w.Env...)
	cmd.Dir = w.Work
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		w.T.Fatalf("run warmd %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		w.T.Fatalf("warmd %s did not finish in 2 minutes:\n%s", strings.Join(args, " "), r.Output())
	}
	return r
}

// Daemon is a `warmd run` process of a World.
type Daemon struct {
	w      *World
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{}
	err    error
	api    *api.Client
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StartDaemon runs `warmd run --config cfg` and waits (30 s at most) until its API answers. The
// daemon is stopped with SIGTERM at cleanup and must then exit 0.
func (w *World) StartDaemon(cfg string) *Daemon {
	w.T.Helper()
	d, exited := w.StartDaemonOrExit(cfg)
	if d == nil {
		w.T.Fatalf("warmd run exited with %d before serving its API:\n%s", exited.Code, exited.Stderr)
	}
	return d
}

// StartDaemonOrExit is StartDaemon for cases where refusing to start is a correct outcome: it
// returns either the running daemon or, when the process exited before its API answered, what it
// printed and its exit code.
func (w *World) StartDaemonOrExit(cfg string) (*Daemon, *Result) {
	w.T.Helper()
	d := &Daemon{w: w, log: &syncBuffer{}, exited: make(chan struct{}), api: api.NewClient(w.Socket)}
	d.cmd = exec.Command(warmdBin, "run", "--config", cfg, "--log-format", "text", "--log-level", "debug", "--grace", "10s")
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.Env = append(os.Environ(), w.Env...)
	d.cmd.Dir = w.Work
	if err := d.cmd.Start(); err != nil {
		w.T.Fatal(err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := d.api.Status(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-d.exited:
			r := &Result{Stderr: d.log.String(), Code: -1}
			var ee *exec.ExitError
			if errors.As(d.err, &ee) {
				r.Code = ee.ExitCode()
			} else if d.err == nil {
				r.Code = 0
			}
			return nil, r
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.cmd.Process.Kill()
			<-d.exited
			w.T.Fatalf("warmd run never answered on %s:\n%s", w.Socket, d.log.String())
		}
	}
	w.T.Cleanup(d.Stop)
	return d, nil
}

// Log is everything the daemon printed so far.
func (d *Daemon) Log() string { return d.log.String() }

// Stop sends SIGTERM and waits (20 s at most); the daemon must exit 0. Stopping twice is a no-op.
func (d *Daemon) Stop() {
	d.w.T.Helper()
	select {
	case <-d.exited:
		return
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
		d.w.T.Errorf("warmd run did not stop within 20 s of SIGTERM")
	}
	if d.err != nil {
		d.w.T.Errorf("warmd run exited with %v after SIGTERM; log:\n%s", d.err, tail(d.Log(), 4000))
	}
}

// StatusJSON is /v1/status as the daemon serves it (what `warmd status -o json` prints), for
// checking that nothing secret reached it.
func (d *Daemon) StatusJSON() []byte {
	d.w.T.Helper()
	st := d.status()
	b, err := json.Marshal(st)
	if err != nil {
		d.w.T.Fatal(err)
	}
	return b
}

func (d *Daemon) status() *api.RawStatus {
	d.w.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := d.api.Status(ctx)
	if err != nil {
		d.w.T.Fatalf("status: %v\nlog:\n%s", err, tail(d.Log(), 4000))
	}
	return st
}

// Weights returns the daemon's weights section.
func (d *Daemon) Weights() prefetch.WeightsStatus {
	d.w.T.Helper()
	ws, _, err := prefetch.WeightsSection.Decode(d.status().Sections)
	if err != nil {
		d.w.T.Fatal(err)
	}
	return ws
}

// WaitModels waits until every named model is ready or failed and returns their statuses.
func (d *Daemon) WaitModels(timeout time.Duration, names ...string) map[string]prefetch.ModelStatus {
	d.w.T.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ws := d.Weights()
		out := map[string]prefetch.ModelStatus{}
		for _, n := range names {
			if ms, ok := ws.Model(n); ok && (ms.State == prefetch.StateReady || ms.State == prefetch.StateFailed) {
				out[n] = ms
			}
		}
		if len(out) == len(names) {
			return out
		}
		if time.Now().After(deadline) {
			d.w.T.Fatalf("models %v not ready or failed after %s: %+v\nlog:\n%s", names, timeout, ws.Models, tail(d.Log(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// NoLeak fails the test if secret appears in any of the texts (named by what, e.g. "daemon log").
func NoLeak(t *testing.T, secret string, texts map[string]string) {
	t.Helper()
	for what, s := range texts {
		if strings.Contains(s, secret) {
			t.Errorf("%s quotes secret content %q", what, secret)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Bucket is where a case's objects live: the hostile stub or versitygw.
type Bucket struct {
	Name     string
	Endpoint string
	// Env carries the S3 credentials warmd needs for this bucket.
	Env []string
	// Stub is set for StubBucket: it records every request.
	Stub  *hostiles3.Server
	t     *testing.T
	store objstore.Store
}

// StubBucket is a bucket on the hostile stub: any key, any bytes.
func StubBucket(t *testing.T) *Bucket {
	t.Helper()
	s := hostiles3.New(t, "hostile")
	return &Bucket{Name: "hostile", Endpoint: s.Endpoint(), Stub: s, t: t,
		Env: []string{"AWS_ACCESS_KEY_ID=hostile", "AWS_SECRET_ACCESS_KEY=hostile"}}
}

// VersityBucket is a fresh bucket on the real versitygw `make test` runs (skips outside it, fails in CI).
func VersityBucket(t *testing.T) *Bucket {
	t.Helper()
	env := testenv.RequireS3(t)
	name := fmt.Sprintf("sec-%d", rand.Uint32())
	if err := os.Mkdir(filepath.Join(env.Root, name), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(env.Root, name)) })
	st, err := objstore.NewS3(context.Background(), config.S3{Endpoint: env.Endpoint}, objstore.Options{
		Credentials: credentials.NewStaticCredentialsProvider(env.AccessKey, env.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	return &Bucket{Name: name, Endpoint: env.Endpoint, t: t, store: st,
		Env: []string{"AWS_ACCESS_KEY_ID=" + env.AccessKey, "AWS_SECRET_ACCESS_KEY=" + env.SecretKey}}
}

// Put stores one object (on versitygw through the S3 API, so ETags and checksums are real).
func (b *Bucket) Put(key string, data []byte) {
	b.t.Helper()
	if b.Stub != nil {
		b.Stub.Put(hostiles3.Object{Key: key, Data: data, ChecksumAlgorithm: "CRC32C"})
		return
	}
	if err := objstore.PutBytes(context.Background(), b.store, b.Name, key, data, objstore.PutOptions{ChecksumAlgorithm: "CRC32C"}); err != nil {
		b.t.Fatalf("put %q on versitygw: %v", key, err)
	}
}

// PutModel stores files under prefix.
func (b *Bucket) PutModel(prefix string, files map[string][]byte) {
	b.t.Helper()
	for name, data := range files {
		b.Put(prefix+name, data)
	}
}

// URL is s3://<bucket>/<prefix>.
func (b *Bucket) URL(prefix string) string { return "s3://" + b.Name + "/" + prefix }

// S3Section is the config's s3 section for this bucket.
func (b *Bucket) S3Section() string { return fmt.Sprintf("{endpoint: %s}", quoteYAML(b.Endpoint)) }

// SmallModel is a loadable model (config.json, one safetensors file with a valid header), a few KiB.
func SmallModel(t *testing.T) map[string][]byte {
	t.Helper()
	m, err := fixtures.NewModel(fixtures.ModelSpec{Shards: 1, TensorsA: 2, BytesPerTensor: 512, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return m.Files
}

// ModelsSection renders config models entries ({name, source, ...extra}) as a YAML flow list.
func ModelsSection(models ...map[string]string) string {
	var items []string
	for _, m := range models {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, k+": "+quoteYAML(m[k]))
		}
		items = append(items, "{"+strings.Join(kv, ", ")+"}")
	}
	return "[" + strings.Join(items, ", ") + "]"
}
