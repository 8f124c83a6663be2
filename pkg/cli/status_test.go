package cli

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/api"
)

// serveStatus serves a recorded /v1/status on a unix socket, as the daemon does, and returns the socket.
func serveStatus(t *testing.T, fixture string) string {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", "status", fixture))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "wst")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "warmd.sock")
	l, err := api.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- api.Serve(ctx, l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) }), time.Second)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return sock
}

// The golden files are `warmd status` of the demo node (recorded with make demo's config): one while
// the weights download, one warm.
func TestStatusGolden(t *testing.T) {
	now := time.Date(2026, 11, 30, 22, 25, 10, 0, time.UTC)
	for _, tc := range []struct {
		fixture, golden string
		args            []string
		code            int
	}{
		{"downloading.json", "status/downloading.table", nil, 0},
		{"warm.json", "status/warm.table", nil, 0},
		{"downloading.json", "status/downloading.check", []string{"--check"}, 1},
		{"warm.json", "status/warm.check", []string{"--check"}, 0},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := newStatusCommandWith(IOStreams{Out: &out, ErrOut: &errOut}, statusOptions{now: func() time.Time { return now }})
			cmd.SilenceUsage, cmd.SilenceErrors = true, true // as under the root command
			cmd.SetArgs(append([]string{"--socket", serveStatus(t, tc.fixture)}, tc.args...))
			err := cmd.Execute()
			code := 0
			var ee *ExitError
			if errors.As(err, &ee) {
				code = ee.Code
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				t.Errorf("exit code %d, want %d (%v)", code, tc.code, err)
			}
			golden(t, tc.golden, out.Bytes())
		})
	}
}

func TestStatusJSONIsTheRawObject(t *testing.T) {
	var out bytes.Buffer
	cmd := newStatusCommandWith(IOStreams{Out: &out, ErrOut: &out}, statusOptions{})
	cmd.SetArgs([]string{"--socket", serveStatus(t, "warm.json"), "-o", "json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"readiness"`, `"warm": true`, `"snapshotPath"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-o json lacks %s", want)
		}
	}
}

func TestStatusWatchStopsWhenWarm(t *testing.T) {
	var out bytes.Buffer
	cmd := newStatusCommandWith(IOStreams{Out: &out, ErrOut: &out}, statusOptions{})
	cmd.SetArgs([]string{"--socket", serveStatus(t, "warm.json"), "--watch", "--until-warm", "--interval", "10ms"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "--- "); n != 1 || !strings.Contains(out.String(), "Warm:    yes") {
		t.Errorf("--watch --until-warm on a warm node drew %d frames:\n%s", n, out.String())
	}
}
