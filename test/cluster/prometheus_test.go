package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/internal/testenv/cluster"
)

// standinWaiting is the vllm:num_requests_waiting the vLLM stand-in reports (STANDIN_REQUESTS_WAITING
// in vllmDeployment): what KEDA's query must read back through Prometheus.
const standinWaiting = 3

// scrapeEvery replaces the shipped monitors' 15–30 s intervals so the step waits seconds, not
// minutes; everything else of them is translated as prometheus-operator translates it.
const scrapeEvery = "2s"

// monitorEndpoint is one endpoint of a ServiceMonitor or PodMonitor: the fields the shipped ones use.
// The translation decodes strictly, so a field added to a shipped monitor fails here until the
// translation (and this test) learns what it means.
type monitorEndpoint struct {
	Port        string `json:"port"`
	Path        string `json:"path,omitempty"`
	Interval    string `json:"interval,omitempty"`
	Relabelings []struct {
		SourceLabels []string `json:"sourceLabels,omitempty"`
		TargetLabel  string   `json:"targetLabel,omitempty"`
		Regex        string   `json:"regex,omitempty"`
		Replacement  *string  `json:"replacement,omitempty"`
		Action       string   `json:"action,omitempty"`
	} `json:"relabelings,omitempty"`
}

type monitorSpec struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	NamespaceSelector struct {
		MatchNames []string `json:"matchNames,omitempty"`
	} `json:"namespaceSelector,omitempty"`
	Endpoints           []monitorEndpoint `json:"endpoints,omitempty"`
	PodMetricsEndpoints []monitorEndpoint `json:"podMetricsEndpoints,omitempty"`
}

var labelChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// operatorScrapeConfigs turns the shipped ServiceMonitors and PodMonitors into Prometheus scrape
// configs the way prometheus-operator does: job serviceMonitor|podMonitor/<ns>/<name>/<i>, Kubernetes
// discovery of endpoints or pods in the monitor's namespaces, a keep on each selector label and on the
// port's name, the endpoint's path and relabelings.
func operatorScrapeConfigs(t *testing.T, objs []*unstructured.Unstructured, kubeconfig string) (jobs []map[string]any, names []string) {
	t.Helper()
	for _, o := range objs {
		kind := o.GetKind()
		if kind != "ServiceMonitor" && kind != "PodMonitor" {
			continue
		}
		raw, err := json.Marshal(o.Object["spec"])
		if err != nil {
			t.Fatal(err)
		}
		var spec monitorSpec
		if err := yaml.UnmarshalStrict(raw, &spec); err != nil {
			t.Fatalf("%s %s/%s: %v (teach test/cluster/prometheus_test.go what the new field means)", kind, o.GetNamespace(), o.GetName(), err)
		}
		nss := spec.NamespaceSelector.MatchNames
		if len(nss) == 0 {
			nss = []string{o.GetNamespace()}
		}
		role, meta, eps, prefix := "endpoints", "__meta_kubernetes_service_label_", spec.Endpoints, "serviceMonitor"
		portLabel := "__meta_kubernetes_endpoint_port_name"
		if kind == "PodMonitor" {
			role, meta, eps, prefix = "pod", "__meta_kubernetes_pod_label_", spec.PodMetricsEndpoints, "podMonitor"
			portLabel = "__meta_kubernetes_pod_container_port_name"
		}
		if len(eps) == 0 {
			t.Fatalf("%s %s/%s has no endpoints", kind, o.GetNamespace(), o.GetName())
		}
		for i, ep := range eps {
			var relabel []map[string]any
			for k, v := range spec.Selector.MatchLabels {
				relabel = append(relabel, map[string]any{"action": "keep", "source_labels": []string{meta + labelChars.ReplaceAllString(k, "_")}, "regex": v})
			}
			relabel = append(relabel,
				map[string]any{"action": "keep", "source_labels": []string{portLabel}, "regex": ep.Port},
				map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
				map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"})
			for _, r := range ep.Relabelings {
				rc := map[string]any{"source_labels": r.SourceLabels}
				if r.TargetLabel != "" {
					rc["target_label"] = r.TargetLabel
				}
				if r.Regex != "" {
					rc["regex"] = r.Regex
				}
				if r.Replacement != nil {
					rc["replacement"] = *r.Replacement
				}
				if r.Action != "" {
					rc["action"] = strings.ToLower(r.Action)
				}
				relabel = append(relabel, rc)
			}
			path := ep.Path
			if path == "" {
				path = "/metrics"
			}
			name := fmt.Sprintf("%s/%s/%s/%d", prefix, o.GetNamespace(), o.GetName(), i)
			names = append(names, name)
			jobs = append(jobs, map[string]any{
				"job_name": name, "scrape_interval": scrapeEvery, "metrics_path": path,
				"kubernetes_sd_configs": []map[string]any{{"role": role, "kubeconfig_file": kubeconfig, "namespaces": map[string]any{"names": nss}}},
				"relabel_configs":       relabel,
			})
		}
	}
	return jobs, names
}

// annotationScrapeConfig is the annotation-driven pod job of Prometheus's own Kubernetes example
// (prometheus.io/scrape, /path, /port), for setups without prometheus-operator.
func annotationScrapeConfig(kubeconfig string) map[string]any {
	return map[string]any{
		"job_name": "kubernetes-pods", "scrape_interval": scrapeEvery,
		"kubernetes_sd_configs": []map[string]any{{"role": "pod", "kubeconfig_file": kubeconfig}},
		"relabel_configs": []map[string]any{
			{"action": "keep", "source_labels": []string{"__meta_kubernetes_pod_annotation_prometheus_io_scrape"}, "regex": "true"},
			{"action": "replace", "source_labels": []string{"__meta_kubernetes_pod_annotation_prometheus_io_path"}, "regex": "(.+)", "target_label": "__metrics_path__"},
			{"action": "replace", "source_labels": []string{"__address__", "__meta_kubernetes_pod_annotation_prometheus_io_port"},
				"regex": `([^:]+)(?::\d+)?;(\d+)`, "replacement": "$1:$2", "target_label": "__address__"},
			{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
			{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
		},
	}
}

// prometheus is a real Prometheus server running inside the node, where pod IPs are reachable.
type prometheus struct {
	c    *cluster.Cluster
	addr string
}

func startPrometheus(t *testing.T, c *cluster.Cluster, name, addr string, jobs []map[string]any) *prometheus {
	t.Helper()
	dir := filepath.Join(c.Dir, name)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := yaml.Marshal(map[string]any{"global": map[string]any{"scrape_interval": scrapeEvery, "evaluation_interval": scrapeEvery}, "scrape_configs": jobs})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	c.StartInNode(t, name, testenv.Prometheus(t), "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	return &prometheus{c: c, addr: addr}
}

// get calls Prometheus's HTTP API inside the node and decodes its data.
func (p *prometheus) get(ctx context.Context, path string, data any) error {
	code, body, err := httpGetInNode(ctx, p.c, "http://"+p.addr+path)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return fmt.Errorf("%s: HTTP %d, not JSON: %.200q", path, code, body)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: HTTP %d: %s", path, code, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

// upJobs waits until every job has at least one target and all its targets are up.
func (p *prometheus) upJobs(ctx context.Context, t *testing.T, jobs []string) {
	t.Helper()
	var last string
	err := cluster.Eventually(ctx, 90*time.Second, time.Second, func(ctx context.Context) (bool, error) {
		var d struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
				ScrapeURL string            `json:"scrapeUrl"`
			} `json:"activeTargets"`
		}
		if err := p.get(ctx, "/api/v1/targets?state=active", &d); err != nil {
			return false, err
		}
		up, down := map[string]int{}, []string{}
		for _, tg := range d.ActiveTargets {
			if tg.Health == "up" {
				up[tg.Labels["job"]]++
			} else {
				down = append(down, fmt.Sprintf("%s %s: %s %s", tg.Labels["job"], tg.ScrapeURL, tg.Health, tg.LastError))
			}
		}
		var missing []string
		for _, j := range jobs {
			if up[j] == 0 {
				missing = append(missing, j)
			}
		}
		last = fmt.Sprintf("up %v; not up: %v; no target up for %v", up, down, missing)
		return len(missing) == 0 && len(down) == 0, fmt.Errorf("%s", last)
	})
	if err != nil {
		t.Fatalf("Prometheus %s: %v", p.addr, err)
	}
	t.Logf("Prometheus %s: %s", p.addr, last)
}

// scalar evaluates an instant query at ts and returns its one value (found false for an empty result).
func (p *prometheus) scalar(ctx context.Context, query string, ts time.Time) (v float64, found bool, err error) {
	var d struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	q := url.Values{"query": {query}, "time": {strconv.FormatFloat(float64(ts.UnixMilli())/1000, 'f', 3, 64)}}
	if err := p.get(ctx, "/api/v1/query?"+q.Encode(), &d); err != nil {
		return 0, false, err
	}
	switch {
	case d.ResultType != "vector":
		return 0, false, fmt.Errorf("query %q: result type %s, want vector", query, d.ResultType)
	case len(d.Result) == 0:
		return 0, false, nil
	case len(d.Result) > 1:
		return 0, false, fmt.Errorf("query %q: %d series, want one", query, len(d.Result))
	}
	s, _ := d.Result[0].Value[1].(string)
	v, err = strconv.ParseFloat(s, 64)
	return v, err == nil, err
}

// scaledObjectQueries returns each shipped ScaledObject trigger's name and Prometheus query.
func scaledObjectQueries(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range objs {
		if o.GetKind() != "ScaledObject" {
			continue
		}
		triggers, _, _ := unstructured.NestedSlice(o.Object, "spec", "triggers")
		for _, tr := range triggers {
			m, _ := tr.(map[string]any)
			if m["type"] != "prometheus" {
				continue
			}
			name, _ := m["name"].(string)
			q, _, _ := unstructured.NestedString(m, "metadata", "query")
			out[o.GetName()+"/"+name] = q
		}
	}
	if len(out) == 0 {
		t.Fatal("no ScaledObject ships a prometheus trigger")
	}
	return out
}

// prometheusAnswersKEDA runs a real Prometheus on the node with the shipped ServiceMonitors and
// PodMonitor translated as prometheus-operator does, and checks what KEDA will read: every monitor
// scrapes an up target, the vLLM stand-in's queue gauge arrives labelled as vLLM labels it, the
// ScaledObject's queue trigger answers the stand-in's value times the extender's lead-time factor
// (checked against the extender's own /metrics), and its no-warm-node trigger answers 0 on the warm
// node. A second Prometheus with the annotation-driven pod job reads the same gauge from the pod's
// prometheus.io annotations.
func (e *e2e) prometheusAnswersKEDA(ctx context.Context, t *testing.T) {
	objs := monitoringObjects(t)
	jobs, names := operatorScrapeConfigs(t, objs, e.c.Kubeconfig)
	op := startPrometheus(t, e.c, "prometheus-operator-style", "127.0.0.1:19090", jobs)
	ann := startPrometheus(t, e.c, "prometheus-annotations", "127.0.0.1:19091", []map[string]any{annotationScrapeConfig(e.c.Kubeconfig)})
	op.upJobs(ctx, t, names)
	ann.upJobs(ctx, t, []string{"kubernetes-pods"})

	model := e.w.qwen7b.name
	waitingQ := fmt.Sprintf("sum(vllm:num_requests_waiting{model_name=%q})", model)
	for _, p := range []*prometheus{op, ann} {
		err := cluster.Eventually(ctx, 30*time.Second, time.Second, func(ctx context.Context) (bool, error) {
			v, ok, err := p.scalar(ctx, waitingQ, time.Now())
			return ok && v == standinWaiting, fmt.Errorf("%s = %v (found %v, err %v), want the stand-in's %d", waitingQ, v, ok, err, standinWaiting)
		})
		if err != nil {
			t.Errorf("Prometheus %s: %v", p.addr, err)
		}
	}
	// The warmd ServiceMonitor's relabeling names the node each daemon runs on.
	nodeQ := fmt.Sprintf(`count(up{job="serviceMonitor/warmd/warmd/0",node=%q})`, e.c.Node)
	if v, ok, err := op.scalar(ctx, nodeQ, time.Now()); err != nil || !ok || v < 1 {
		t.Errorf("%s = %v (found %v, err %v): the ServiceMonitor's node relabeling did not apply", nodeQ, v, ok, err)
	}

	queries := scaledObjectQueries(t, objs)
	extenders, err := e.c.Clientset.CoreV1().Pods("warmd").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=warmd-extender"})
	if err != nil {
		t.Fatal(err)
	}
	fastestQ := fmt.Sprintf("min(warmd_cluster_fastest_ready_seconds{model=%q})", model)
	for name, q := range queries {
		var last error
		err := cluster.Eventually(ctx, 60*time.Second, 2*time.Second, func(ctx context.Context) (bool, error) {
			at := time.Now()
			got, ok, err := op.scalar(ctx, q, at)
			if err != nil || !ok {
				last = fmt.Errorf("no answer (err %v)", err)
				return false, last
			}
			var want float64
			switch {
			case strings.Contains(q, "num_requests_waiting"):
				f, fok, err := op.scalar(ctx, fastestQ, at)
				if err != nil || !fok {
					last = fmt.Errorf("%s has no answer (err %v)", fastestQ, err)
					return false, last
				}
				// The extender's own /metrics must say the same as Prometheus (only the elected replica exports it).
				direct := math.Inf(1)
				for _, p := range extenders.Items {
					_, body, _ := httpGetInNode(ctx, e.c, "http://"+p.Status.PodIP+":8888/metrics")
					if v, found := metricMin(body, "warmd_cluster_fastest_ready_seconds", fmt.Sprintf("model=%q", model)); found {
						direct = min(direct, v)
					}
				}
				if f != direct {
					last = fmt.Errorf("Prometheus has %s = %v, the extenders' /metrics %v", fastestQ, f, direct)
					return false, last
				}
				want = standinWaiting * (1 + min(f/120, 3))
			case strings.Contains(q, "warmd_warm_nodes"):
				want = 0 // the node is warm for the model by now: no headroom replicas
			default:
				t.Fatalf("trigger %s: no expectation for query %q (teach this test what it should answer)", name, q)
			}
			last = fmt.Errorf("answered %v, want %v", got, want)
			return math.Abs(got-want) <= 1e-9*max(1, math.Abs(want)), last
		})
		if err != nil {
			t.Errorf("ScaledObject trigger %s, query %q: %v", name, q, err)
		} else {
			t.Logf("ScaledObject trigger %s answers as expected: %v", name, last)
		}
	}
}

// metricMin is the smallest sample of a family whose labels contain all the given pairs.
func metricMin(text, family string, labels ...string) (float64, bool) {
	lo, found := math.Inf(1), false
	for _, line := range strings.Split(text, "\n") {
		if v, ok := metricSum(line, family, labels...); ok {
			lo, found = min(lo, v), true
		}
	}
	return lo, found
}
