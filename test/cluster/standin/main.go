// Command standin is the cluster e2e's stand-in for the vLLM OpenAI server (no GPU here): it takes
// vLLM's own arguments from the example Deployment (manifests/examples/vllm-qwen.yaml), replays a real
// vLLM startup log to stdout/stderr (time-compressed) so the kubelet and containerd write a real CRI log
// for warmd's follower, verifies the sha256 of every weight file under --model against what the test
// put in S3 (STANDIN_SHA256: "sha256  name" lines, sha256sum format), and then serves /health on --port
// with uvicorn-style access log lines, as vLLM does once ready, and /metrics with vLLM's queue gauges
// (vllm:num_requests_waiting is STANDIN_REQUESTS_WAITING, default 0). A weight mismatch exits 1, naming the
// file: the pod then never becomes Ready.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	fs := flag.NewFlagSet("standin", flag.ContinueOnError)
	model := fs.String("model", "", "model dir (the HF snapshot the Deployment names)")
	port := fs.Int("port", 8000, "port for /health")
	served := fs.String("served-model-name", "", "the model_name label of /metrics, as vLLM's")
	replay := fs.String("replay", "/replay/vllm.log", "recorded CRI-format vLLM log to replay")
	speed := fs.Float64("speed", 100, "replay this many times faster than recorded")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if err := replayLog(*replay, *speed); err != nil {
		fmt.Fprintln(os.Stderr, "standin: replay:", err)
		os.Exit(1)
	}
	n, err := verify(*model, os.Getenv("STANDIN_SHA256"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin: weights:", err)
		os.Exit(1)
	}
	fmt.Printf("standin: weights verified: %d files under %s match their sha256\n", n, *model)
	http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Printf("\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO:     %s:%s - \"GET /health HTTP/1.1\" 200 OK\n", host, strings.TrimPrefix(r.RemoteAddr, host+":"))
	})
	waiting := os.Getenv("STANDIN_REQUESTS_WAITING")
	if waiting == "" {
		waiting = "0"
	}
	if _, err := strconv.ParseFloat(waiting, 64); err != nil {
		fmt.Fprintln(os.Stderr, "standin: STANDIN_REQUESTS_WAITING:", err)
		os.Exit(2)
	}
	name := *served
	if name == "" {
		name = *model
	}
	// vLLM's own queue gauges, labelled as vLLM labels them (model_name is --served-model-name).
	http.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		labels := fmt.Sprintf(`{engine="0",model_name=%q}`, name)
		fmt.Fprintf(w, "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting%s %s\n", labels, waiting)
		fmt.Fprintf(w, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running%s 0\n", labels)
	})
	if err := http.ListenAndServe(fmt.Sprintf(":%d", *port), nil); err != nil {
		fmt.Fprintln(os.Stderr, "standin: serve:", err)
		os.Exit(1)
	}
}

// replayLog writes each recorded line's content to the stream it was recorded on (CRI format:
// "<RFC3339Nano> <stdout|stderr> <P|F> <content>"; P is a partial line continued by the next), keeping
// the recorded gaps divided by speed. Recorded /health probes are left out: the real ones follow.
func replayLog(path string, speed float64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var prev time.Time
	for sc.Scan() {
		ts, rest, ok := strings.Cut(sc.Text(), " ")
		stream, rest, ok2 := strings.Cut(rest, " ")
		tag, content, ok3 := strings.Cut(rest, " ")
		if !ok || !ok2 || !ok3 {
			return fmt.Errorf("%s: not a CRI log line: %q", path, sc.Text())
		}
		if strings.Contains(content, `"GET /health HTTP/1.1"`) {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			if !prev.IsZero() && t.After(prev) {
				time.Sleep(time.Duration(float64(t.Sub(prev)) / speed))
			}
			prev = t
		}
		out := os.Stdout
		if stream == "stderr" {
			out = os.Stderr
		}
		if tag == "F" {
			content += "\n"
		}
		io.WriteString(out, content)
	}
	return sc.Err()
}

// verify checks every "sha256  name" line of sums against the file under dir (following the HF
// snapshot's symlinks into blobs/), and that the snapshot holds no file the list does not name.
func verify(dir, sums string) (int, error) {
	if dir == "" || sums == "" {
		return 0, fmt.Errorf("--model and STANDIN_SHA256 are required")
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(sums), "\n") {
		sum, name, ok := strings.Cut(strings.TrimSpace(line), "  ")
		if !ok {
			return 0, fmt.Errorf("STANDIN_SHA256 line %q is not \"<sha256>  <name>\"", line)
		}
		want[name] = sum
	}
	for name, sum := range want {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return 0, err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", name, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sum {
			return 0, fmt.Errorf("%s: sha256 %s, want %s", name, got, sum)
		}
	}
	var extra []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if _, ok := want[rel]; !ok {
			extra = append(extra, rel)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(extra) > 0 {
		return 0, fmt.Errorf("files the model does not have: %s", strings.Join(extra, ", "))
	}
	return len(want), nil
}
