package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon/daemonstatus"
	"warmd.io/warmd/pkg/datadir"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/state"
)

type fakePart struct {
	name     string
	fail     error
	reconfig atomic.Int32
	stopped  atomic.Bool
	notReady atomic.Pointer[string] // Ready's error while set
	quit     chan struct{}          // closed: Run returns on its own
}

func (p *fakePart) Name() string { return p.name }
func (p *fakePart) Run(ctx context.Context) error {
	if p.fail != nil {
		return p.fail
	}
	select {
	case <-ctx.Done():
	case <-p.quit:
	}
	p.stopped.Store(true)
	return nil
}
func (p *fakePart) Ready() error {
	if why := p.notReady.Load(); why != nil {
		return errors.New(*why)
	}
	return nil
}
func (p *fakePart) Reconfigure(*config.NodeConfig) { p.reconfig.Add(1) }

func writeConfig(t *testing.T, dir, extra string) (string, []byte, *config.NodeConfig) {
	t.Helper()
	data := []byte("apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nnodeName: n1\ndataDir: " + dir + "\napi: {listen: '" + freeAddr(t) + "'}\n" + extra)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return path, data, cfg
}

func start(t *testing.T, part *fakePart) (*config.NodeConfig, string, context.CancelFunc, <-chan error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "wd") // short: unix socket paths are limited to ~104 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path, data, cfg := writeConfig(t, dir, "")
	reg := metrics.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, Options{
			ConfigPath: path, ConfigData: data, Config: cfg, Grace: 5 * time.Second, Poll: 50 * time.Millisecond,
			Assemble: func(Deps) (Assembly, error) { return Assembly{Parts: []Part{part}}, nil },
		}, state.New(nil), metrics.New(reg), reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	return cfg, path, cancel, errc
}

func waitStatus(t *testing.T, socket string, ok func(*api.RawStatus) bool) *api.RawStatus {
	t.Helper()
	c := api.NewClient(socket)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st, err := c.Status(context.Background())
		if err == nil && ok(st) {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("daemon status never reached the expected state")
	return nil
}

func TestRunServesStatusAndStopsCleanly(t *testing.T) {
	part := &fakePart{name: "fake"}
	cfg, _, cancel, errc := start(t, part)
	st := waitStatus(t, cfg.API.Socket, func(*api.RawStatus) bool { return true })
	d, ok, err := daemonstatus.Section.Decode(st.Sections)
	if !ok || err != nil {
		t.Fatalf("daemon section: %v %v", ok, err)
	}
	if d.NodeName != "n1" || len(d.Parts) != 1 || d.Parts[0] != "fake" {
		t.Errorf("daemon section = %+v", d)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run returned %v after a clean stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within its grace period")
	}
	if !part.stopped.Load() {
		t.Error("part was not stopped")
	}
	if _, err := os.Stat(cfg.API.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket %s still exists after shutdown: %v", cfg.API.Socket, err)
	}
	if _, err := api.NewClient(cfg.API.Socket).Status(context.Background()); !errors.Is(err, api.ErrNotRunning) {
		t.Errorf("status after stop: %v, want ErrNotRunning", err)
	}
}

func TestReloadAppliesValidAndKeepsOldOnInvalid(t *testing.T) {
	part := &fakePart{name: "fake"}
	cfg, path, cancel, errc := start(t, part)
	defer func() { cancel(); <-errc }()
	waitStatus(t, cfg.API.Socket, func(*api.RawStatus) bool { return true })

	good := "apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nnodeName: n1\ndataDir: " + cfg.DataDir +
		"\napi: {listen: '" + cfg.API.Listen + "'}\nmodels:\n- {name: org/m, source: 's3://b/m/'}\n"
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, cfg.API.Socket, func(st *api.RawStatus) bool {
		c, _, _ := daemonstatus.ConfigSection.Decode(st.Sections)
		return len(c.Models) == 1
	})
	if part.reconfig.Load() != 1 {
		t.Errorf("part reconfigured %d times, want 1", part.reconfig.Load())
	}
	if err := os.WriteFile(path, []byte(good+"bogus: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st = waitStatus(t, cfg.API.Socket, func(st *api.RawStatus) bool {
		d, _, _ := daemonstatus.Section.Decode(st.Sections)
		return d.LastReload != nil && !d.LastReload.Applied
	})
	c, _, _ := daemonstatus.ConfigSection.Decode(st.Sections)
	if len(c.Models) != 1 || c.Models[0].Name != "org/m" {
		t.Errorf("config after a rejected edit = %+v, want the previous one", c)
	}
	if part.reconfig.Load() != 1 {
		t.Errorf("a rejected config reached the part")
	}
}

func TestFailingPartStopsDaemonWithItsError(t *testing.T) {
	boom := errors.New("boom")
	_, _, cancel, errc := start(t, &fakePart{name: "bad", fail: boom})
	defer cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, boom) {
			t.Fatalf("Run = %v, want the part's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("daemon kept running after a part failed")
	}
}

func TestSecondDaemonOnSameSocketRefused(t *testing.T) {
	cfg, _, cancel, errc := start(t, &fakePart{name: "fake"})
	defer func() { cancel(); <-errc }()
	waitStatus(t, cfg.API.Socket, func(*api.RawStatus) bool { return true })
	if _, err := api.ListenUnix(cfg.API.Socket); err == nil {
		t.Fatal("a second listener took over a live daemon's socket")
	}
}

func TestSecondDaemonOnSameDataDirRefused(t *testing.T) {
	cfg, _, cancel, errc := start(t, &fakePart{name: "fake"})
	defer func() { cancel(); <-errc }()
	waitStatus(t, cfg.API.Socket, func(*api.RawStatus) bool { return true })

	second := *cfg
	second.API.Socket = cfg.DataDir + "/other.sock"
	built := false
	reg := metrics.NewRegistry()
	err := Run(context.Background(), Options{Config: &second, Grace: time.Second,
		Assemble: func(Deps) (Assembly, error) { built = true; return Assembly{Parts: []Part{&fakePart{name: "x"}}}, nil }},
		state.New(nil), metrics.New(reg), reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var le *datadir.LockedError
	if !errors.As(err, &le) {
		t.Fatalf("second daemon on the same data dir: %v, want a *datadir.LockedError", err)
	}
	for _, want := range []string{fmt.Sprintf("pid %d", os.Getpid()), cfg.API.Socket, "warmd run"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
	if built {
		t.Error("the second daemon built its parts before taking the lock")
	}
	if _, err := os.Stat(second.API.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the second daemon created its socket: %v", err)
	}
}

func TestReloadMovingDataDirIsRejected(t *testing.T) {
	part := &fakePart{name: "fake"}
	cfg, path, cancel, errc := start(t, part)
	defer func() { cancel(); <-errc }()
	waitStatus(t, cfg.API.Socket, func(*api.RawStatus) bool { return true })
	moved := "apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nnodeName: n1\ndataDir: " + cfg.DataDir + "/elsewhere" +
		"\napi: {listen: '" + cfg.API.Listen + "', socket: " + cfg.API.Socket + "}\n"
	if err := os.WriteFile(path, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, cfg.API.Socket, func(st *api.RawStatus) bool {
		d, _, _ := daemonstatus.Section.Decode(st.Sections)
		return d.LastReload != nil
	})
	d, _, _ := daemonstatus.Section.Decode(st.Sections)
	if d.LastReload.Applied || !strings.Contains(d.LastReload.Error, "dataDir cannot change") {
		t.Fatalf("reload moving dataDir: %+v", d.LastReload)
	}
	if part.reconfig.Load() != 0 {
		t.Error("the part was reconfigured onto another data dir")
	}
}

// freeAddr returns a free local TCP address, so a test knows where /readyz answers.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// readyz returns /readyz's status code and body.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitReadyz(t *testing.T, addr string, code int, body string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, text := readyz(t, addr)
		if got == code && strings.Contains(text, body) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q, want %d with %q", got, text, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadyzTellsTheTruth: /readyz is 503 naming the part and its reason until the part's first pass
// is done, 200 after, and 503 again once the part stopped on its own.
func TestReadyzTellsTheTruth(t *testing.T) {
	part := &fakePart{name: "fake", quit: make(chan struct{})}
	why := "first inventory not done"
	part.notReady.Store(&why)
	cfg, _, cancel, errc := start(t, part)
	defer func() { cancel(); <-errc }()
	waitReadyz(t, cfg.API.Listen, http.StatusServiceUnavailable, "fake: first inventory not done")
	part.notReady.Store(nil)
	waitReadyz(t, cfg.API.Listen, http.StatusOK, "ok")
	close(part.quit)
	waitReadyz(t, cfg.API.Listen, http.StatusServiceUnavailable, "fake: stopped")
}
