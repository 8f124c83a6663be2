//go:build bench

package extender

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/predict"
)

// TestBenchExtender is `make bench-extender` (scripts/bench/extender.sh): it creates
// WARMD_BENCH_NODES Nodes (default 5,000) in the real API server, lets the extender's informer list
// them, then sends WARMD_BENCH_REQUESTS (default 10,000) nodeCacheCapable /prioritize requests naming
// every Node over loopback HTTP, one at a time, and prints the latency percentiles. It reports; it
// asserts no timing. The bench build tag keeps it out of `make test`: only the script builds it.
func TestBenchExtender(t *testing.T) {
	nNodes, nReq := envInt(t, "WARMD_BENCH_NODES", 5000), envInt(t, "WARMD_BENCH_REQUESTS", 10000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	models := []string{"Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-32B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"}
	states := []string{"warm", "weights", "image", "cold", "failed"}
	names := make([]string, nNodes)
	nodes := make([]*corev1.Node, nNodes)
	for i := range nNodes {
		names[i] = fmt.Sprintf("bench-gpu-%05d", i)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i],
			Labels: map[string]string{nodelabels.LabelSKU: []string{"nvidia-h100-80gb-hbm3", "nvidia-a100-sxm4-80gb"}[i%2]}, Annotations: map[string]string{}}}
		var preds []predict.Prediction
		for j, m := range models {
			n.Labels[model.LabelKey(m)] = states[(i+j)%len(states)]
			preds = append(preds, predict.Prediction{Model: m, Seconds: float64(60 + (i*7+j*13)%400)})
		}
		ann, err := predict.Annotation(preds, 0)
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations[nodelabels.AnnotationPredicted] = ann
		nodes[i] = n
	}
	// The Nodes are created in a real kube-apiserver; the informer lists and watches it.
	env := kubeenv.Start(t)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for _, n := range nodes {
		g.Go(func() error {
			_, err := env.Client.CoreV1().Nodes().Create(gctx, n, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("create nodes: %v", err)
	}
	t.Logf("created %d Nodes in the API server in %v", nNodes, time.Since(start).Round(time.Millisecond))
	cs := env.Client

	ix := NewIndex()
	x := New(Config{FilterFailed: true}, ix, metrics.NewExtender(prometheus.NewRegistry(), ix, nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx, cs, 0) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "informer sync", func() bool { return x.Synced() && ix.Len() == nNodes })
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()

	body := argsBody(t, vllmPod(models[0]), nil, names)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	post := func() time.Duration {
		t0 := time.Now()
		resp, err := client.Post(srv.URL+"/prioritize", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n == 0 {
			t.Fatalf("prioritize: %s", resp.Status)
		}
		return time.Since(t0)
	}
	for range 200 { // warm up connections and caches
		post()
	}
	lat := make([]time.Duration, nReq)
	cpu0 := cpuTime(t)
	for i := range lat {
		lat[i] = post()
	}
	cpu := cpuTime(t) - cpu0
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
	t.Logf("request body %d bytes; %d requests; CPU (client + extender, this process) %.2f ms per request",
		len(body), nReq, float64(cpu)/float64(nReq)/1e6)
	fmt.Printf("extender: p50 %.2f ms, p99 %.2f ms over %d nodes\n", ms(0.50), ms(0.99), nNodes)
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// cpuTime is this process's user+system CPU time: unlike latency, it does not depend on how busy
// the machine is.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
