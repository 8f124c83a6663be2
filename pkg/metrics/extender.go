package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// ClusterView is what the extender knows about every Node, read at scrape time so the gauges never
// go stale and no goroutine has to refresh them.
type ClusterView interface {
	// WarmNodes counts Nodes whose models.warmd.io label says warm, per model.
	WarmNodes() map[string]int
	// FastestReady is the lowest predicted time-to-ready over all Nodes, per model.
	FastestReady() map[string]float64
}

// ReplicaView counts vLLM replicas per model: ready ones, and those ready for less than the
// freshness window (their prefix caches are still filling).
type ReplicaView interface {
	Counts() (ready, fresh map[string]int)
}

// Extender holds the scheduler extender's metrics (the `warmd extender` Deployment, not the node daemon).
type Extender struct {
	Requests *prometheus.CounterVec
	Duration *prometheus.HistogramVec
	// Refused counts requests the extender answered without serving them, by reason: in_flight (503,
	// the bound on requests in flight was reached), body_too_large and too_many_nodes (413: the body
	// bound, or the candidate bound reached while the body was read), unauthenticated (no or an
	// untrusted client certificate; counted by the TLS handshake's failure).
	Refused *prometheus.CounterVec
	// InFlight is the number of scheduler requests being served now.
	InFlight prometheus.Gauge
	// leader, when set, says whether this replica exports the cluster-wide series (see SetLeader).
	leader atomic.Pointer[func() bool]
}

// SetLeader makes the cluster-wide series (warmd_warm_nodes, warmd_cluster_fastest_ready_seconds,
// warmd_vllm_*) exported only while leader returns true, so that of several extender replicas, which
// all see the same Nodes, one exports them and a sum() over replicas counts each Node once.
// warmd_extender_leader says which replica does. Without SetLeader every replica exports them.
func (e *Extender) SetLeader(leader func() bool) { e.leader.Store(&leader) }

func (e *Extender) exporting() bool {
	if f := e.leader.Load(); f != nil {
		return (*f)()
	}
	return true
}

// NewExtender creates and registers the extender's collectors on reg; view feeds warmd_warm_nodes and
// warmd_cluster_fastest_ready_seconds, the signals KEDA or an HPA external metric scale on, and
// replicas (nil: not exported) feeds warmd_vllm_ready_replicas and warmd_vllm_fresh_replicas.
func NewExtender(reg prometheus.Registerer, view ClusterView, replicas ReplicaView) *Extender {
	e := &Extender{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_extender_requests_total", Help: "Scheduler extender requests by verb (filter, prioritize) and result (ok, error, refused).",
		}, []string{"verb", "result"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "warmd_extender_request_duration_seconds", Help: "Time to answer a scheduler extender request.",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25},
		}, []string{"verb"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_extender_refused_total", Help: "Scheduler extender requests refused before they were served, by reason (in_flight, body_too_large, unauthenticated).",
		}, []string{"reason"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "warmd_extender_in_flight_requests", Help: "Scheduler extender requests being served now (bounded by --max-in-flight).",
		}),
	}
	reg.MustRegister(e.Requests, e.Duration, e.Refused, e.InFlight, &clusterCollector{view: view, replicas: replicas, exporting: e.exporting})
	return e
}

var (
	warmNodesDesc = prometheus.NewDesc("warmd_warm_nodes",
		"Nodes whose models.warmd.io/<model> label is warm, per model.", []string{"model"}, nil)
	fastestReadyDesc = prometheus.NewDesc("warmd_cluster_fastest_ready_seconds",
		"Lowest predicted time-to-ready of a new replica over all Nodes (warmd.io/predicted-ready), per model.", []string{"model"}, nil)
	readyReplicasDesc = prometheus.NewDesc("warmd_vllm_ready_replicas",
		"vLLM pods of each model whose Ready condition is True.", []string{"model"}, nil)
	freshReplicasDesc = prometheus.NewDesc("warmd_vllm_fresh_replicas",
		"Ready vLLM pods of each model that became ready within the freshness window (empty prefix cache).", []string{"model"}, nil)
	leaderDesc = prometheus.NewDesc("warmd_extender_leader",
		"1 on the extender replica that exports the cluster-wide series (warmd_warm_nodes, …), else 0.", nil, nil)
)

type clusterCollector struct {
	view      ClusterView
	replicas  ReplicaView
	exporting func() bool
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- leaderDesc
	ch <- warmNodesDesc
	ch <- fastestReadyDesc
	if c.replicas != nil {
		ch <- readyReplicasDesc
		ch <- freshReplicasDesc
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.exporting() {
		ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, 1)
	for m, n := range c.view.WarmNodes() {
		ch <- prometheus.MustNewConstMetric(warmNodesDesc, prometheus.GaugeValue, float64(n), m)
	}
	for m, s := range c.view.FastestReady() {
		ch <- prometheus.MustNewConstMetric(fastestReadyDesc, prometheus.GaugeValue, s, m)
	}
	if c.replicas == nil {
		return
	}
	ready, fresh := c.replicas.Counts()
	for m, n := range ready {
		ch <- prometheus.MustNewConstMetric(readyReplicasDesc, prometheus.GaugeValue, float64(n), m)
		ch <- prometheus.MustNewConstMetric(freshReplicasDesc, prometheus.GaugeValue, float64(fresh[m]), m)
	}
}
