package security

// Class 4: the extender endpoint. Anything that reaches port 8888 can send a body; the probe's 8
// concurrent 57 MiB bodies took the extender's heap to 3 GB.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warmd.io/warmd/internal/testenv/kubeenv"
)

// TestExtenderBoundsHostileBodies runs the real `warmd extender` against a real API server and sends
// it 16 hostile requests at once, streamed without a Content-Length (so only reading can bound them)
// or declaring one: 57 MiB of one Node name, 57 MiB declared, and 5.5 MiB of 600,000 short names.
// Each must be refused (413, or 503 past the requests in flight), within a bound on time and the
// extender's own peak RSS, and a scheduler's request right after still gets its scores.
func TestExtenderBoundsHostileBodies(t *testing.T) {
	kenv := kubeenv.Start(t)
	w := NewWorld(t)
	kubeconfig := kenv.Kubeconfig(t, "sec-extender", w.Work)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	cmd, peak := rssCommand(t, ctx, warmdBin, "extender", "--kubeconfig", kubeconfig, "--listen", addr, "--log-format", "text")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Dir = w.Work
	must(t, cmd.Start())
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() { cmd.Process.Signal(syscall.SIGTERM); <-exited }()
	deadline := time.Now().Add(time.Minute)
	for {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the extender never became ready:\n%s", tail(logs.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}

	oneName := []byte(`{"NodeNames":["` + strings.Repeat("a", 57<<20) + `"]}`)
	var shortNames bytes.Buffer
	shortNames.WriteString(`{"NodeNames":[`)
	for i := range 600_000 {
		if i > 0 {
			shortNames.WriteByte(',')
		}
		fmt.Fprintf(&shortNames, `"n-%06d"`, i)
	}
	shortNames.WriteString(`]}`)
	shapes := []struct {
		name     string
		body     []byte
		declared bool
	}{
		{"57 MiB of one name, streamed", oneName, false},
		{"57 MiB declared", oneName, true},
		{fmt.Sprintf("%d bytes of 600,000 names, streamed", shortNames.Len()), shortNames.Bytes(), false},
	}
	client := &http.Client{Timeout: time.Minute}
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]map[int]int{}
	for i := range 16 {
		s := shapes[i%len(shapes)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body io.Reader = bytes.NewReader(s.body)
			if !s.declared {
				body = io.MultiReader(body) // no length known: sent chunked
			}
			code := 0
			if resp, err := client.Post("http://"+addr+"/prioritize", "application/json", body); err == nil {
				io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
				resp.Body.Close()
				code = resp.StatusCode
			} // a connection closed while still sending is a refusal too: code 0
			mu.Lock()
			if codes[s.name] == nil {
				codes[s.name] = map[int]int{}
			}
			codes[s.name][code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for shape, byCode := range codes {
		for code, n := range byCode {
			if code != 0 && code != http.StatusRequestEntityTooLarge && code != http.StatusServiceUnavailable {
				t.Errorf("%s: %d request(s) answered %d, want 413 or 503", shape, n, code)
			}
		}
	}
	resp, err := client.Post("http://"+addr+"/prioritize", "application/json",
		strings.NewReader(`{"Pod":{"metadata":{"name":"p"}},"NodeNames":["node-a"]}`))
	if err != nil {
		t.Fatalf("a scheduler request after the hostile ones: %v", err)
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(answer), "node-a") {
		t.Errorf("a scheduler request after the hostile ones: %d %s", resp.StatusCode, answer)
	}
	m, err := http.Get("http://" + addr + "/metrics")
	must(t, err)
	metrics, _ := io.ReadAll(m.Body)
	m.Body.Close()
	for _, reason := range []string{`reason="body_too_large"`, `reason="too_many_nodes"`} {
		if !strings.Contains(string(metrics), reason) {
			t.Errorf("warmd_extender_refused_total has no %s sample", reason)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	rss := peak()
	t.Logf("answers %v in %s; the extender's peak RSS %d MiB", codes, took.Round(100*time.Millisecond), rss>>20)
	if took > 30*time.Second {
		t.Errorf("16 hostile requests took %s, bound 30s", took)
	}
	if rss > 256<<20 {
		t.Errorf("the extender's peak RSS %d MiB, bound 256 MiB", rss>>20)
	}
	if n := len(logs.String()); n > 64<<10 {
		t.Errorf("the extender logged %d bytes: a body reached its log", n)
	}
}
