package metrics_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/metrics"
)

// view is a fixed cluster: the extender's series get one sample each.
type view struct{}

func (view) WarmNodes() map[string]int        { return map[string]int{"org/m": 2} }
func (view) FastestReady() map[string]float64 { return map[string]float64{"org/m": 70} }
func (view) Counts() (ready, fresh map[string]int) {
	return map[string]int{"org/m": 3}, map[string]int{"org/m": 1}
}

// populate gives every vector one series, as a running daemon and extender would, so the scrape
// shows every family (an empty vector exports nothing and would escape the lint).
func populate(m *metrics.Metrics, e *metrics.Extender) {
	m.Daemon.BuildInfo.WithLabelValues("v0.1.0").Set(1)
	m.Daemon.ConfigReloads.WithLabelValues("applied").Inc()
	m.GPU.Info.WithLabelValues("nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", "580.65").Set(1)
	m.GPU.Count.Set(8)
	m.Images.PullSeconds.WithLabelValues("success").Observe(12)
	m.Images.Bytes.Add(1 << 30)
	m.Images.ByState.WithLabelValues("pinned").Set(1)
	m.Images.LayerUnpackSeconds.WithLabelValues("gzip-warmd-indexed").Observe(4)
	m.Images.InflatedBytes.WithLabelValues("gzip-warmd-indexed").Add(1 << 30)
	m.Weights.Bytes.Add(15 << 30)
	m.Weights.DownloadSeconds.WithLabelValues("org/m", "ok").Observe(40)
	m.Weights.ByState.WithLabelValues("verified").Set(1)
	m.Cache.Bytes.WithLabelValues("inductor").Set(1 << 20)
	m.Cache.Files.WithLabelValues("inductor").Set(10)
	m.Cache.Bundles.WithLabelValues("restored").Inc()
	m.Cache.Starts.WithLabelValues("hit").Inc()
	m.Cache.RestoredButMissed.Inc()
	m.Prewarm.Bytes.Add(4 << 30)
	m.Prewarm.Runs.WithLabelValues("started").Inc()
	m.Peers.ServedBytes.Add(1 << 20)
	m.Peers.Refused.WithLabelValues("unauthenticated").Inc()
	m.Peers.FetchedBytes.WithLabelValues("org/m", "peer").Add(1 << 20)
	m.Peers.Dropped.WithLabelValues("corrupt").Inc()
	m.CompileKey.Checks.WithLabelValues("miss").Inc()
	m.CompileKey.Outcomes.WithLabelValues("miss", "miss", "agree").Inc()
	m.Phases.PhaseSeconds.WithLabelValues("weight_load", "org/m", "nvidia-h100-80gb-hbm3", "hit").Observe(9)
	m.Phases.Starts.WithLabelValues("ready", "hit").Inc()
	m.Readiness.NodeWrites.WithLabelValues("ok").Inc()
	m.Readiness.PredictedReady.WithLabelValues("org/m").Set(60)
	m.Readiness.Observe(true, map[string]string{"org/m": "warm"})
	e.Requests.WithLabelValues("prioritize", "ok").Inc()
	e.Duration.WithLabelValues("prioritize").Observe(0.001)
	e.Refused.WithLabelValues("in_flight").Inc()
}

// TestPromtoolCheckMetrics scrapes a live /metrics of every collector warmd registers (the daemon's
// and the extender's, Go runtime and process collectors included) and runs `promtool check metrics`
// on it: no naming problem (a _count suffix on a gauge, a counter without _total, …) may ship.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := testenv.Promtool(t)
	reg := metrics.NewRegistry()
	m := metrics.New(reg)
	e := metrics.NewExtender(reg, view{}, view{})
	populate(m, e)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}

	// Every registered warmd family is in the scrape.
	ch := make(chan *prometheus.Desc, 256)
	reg.Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "(warmd_[^"]+)"`)
	var missing []string
	for d := range ch {
		if n := fq.FindStringSubmatch(d.String()); n != nil && !bytes.Contains(body, []byte("\n# TYPE "+n[1]+" ")) {
			missing = append(missing, n[1])
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Fatalf("populate() leaves these families out of the scrape, so the lint would not see them: %v", missing)
	}

	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics (%v):\n%s", err, out)
	}
	if strings.Contains(string(body), "warmd_gpu_count") {
		t.Error("warmd_gpu_count is back: a _count suffix belongs to histograms")
	}
}
