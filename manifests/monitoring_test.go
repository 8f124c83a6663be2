package manifests_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/golden"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/extender"
	"warmd.io/warmd/pkg/metrics"
)

// monitoringSets turn on every monitoring object of the chart.
var monitoringSets = []string{"serviceMonitor.enabled=true", "prometheusRule.enabled=true", "grafanaDashboard.enabled=true"}

// generatedHeader starts each manifests/monitoring file the chart generates.
const generatedHeader = "# Generated from charts/warmd (templates/%s) by `go test ./manifests -run TestGeneratedMonitoring -update`:\n# edit the chart, then regenerate.\n"

// TestGeneratedMonitoring keeps manifests/monitoring's PrometheusRule and dashboard ConfigMap equal
// to the chart's (the chart is their one source): regenerate with -update after changing the chart.
func TestGeneratedMonitoring(t *testing.T) {
	for _, tc := range []struct{ kind, name, file, template string }{
		{"PrometheusRule", "warmd", "monitoring/prometheusrule.yaml", "prometheusrule.yaml"},
		{"ConfigMap", "warmd-grafana-dashboard", "monitoring/grafana-dashboard.yaml", "grafana-dashboard.yaml"},
	} {
		obj := find(t, render(t, monitoringSets...), tc.kind, tc.name).DeepCopy()
		l := obj.GetLabels()
		for _, k := range helmLabels {
			delete(l, k)
		}
		obj.SetLabels(l)
		b, err := yaml.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		golden.Check(t, tc.file, append([]byte(fmt.Sprintf(generatedHeader, tc.template)), b...))
	}
}

// rules returns the chart's rule groups as a Prometheus rule file.
func rules(t *testing.T) []byte {
	t.Helper()
	pr := find(t, render(t, monitoringSets...), "PrometheusRule", "warmd")
	groups, _, err := unstructured.NestedSlice(pr.Object, "spec", "groups")
	if err != nil || len(groups) == 0 {
		t.Fatalf("PrometheusRule has no groups: %v", err)
	}
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(testenv.Promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPromtoolChecksRules: the alerts parse and lint clean, and behave as documented on recorded
// series (testdata/rules_test.yaml: promtool's unit tests, each alert firing and staying quiet).
func TestPromtoolChecksRules(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules(t), 0o644); err != nil {
		t.Fatal(err)
	}
	out := promtool(t, dir, "check", "rules", "rules.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules:\n%s", out)
	}
	t.Logf("promtool check rules:\n%s", out)
	tests, err := os.ReadFile("testdata/rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	out = promtool(t, dir, "test", "rules", "rules_test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
	t.Logf("promtool test rules:\n%s", out)
}

// dashboard returns the chart's Grafana dashboard.
func dashboard(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("files/grafana-dashboard.json: %v", err)
	}
	return d
}

// dashboardExprs returns every PromQL expression of the dashboard's panels, with Grafana's
// variables replaced by values PromQL accepts.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	r := strings.NewReplacer("$__rate_interval", "5m", "$__range", "6h", "$model", ".*", "$node", ".*")
	var out []string
	panels, _ := dashboard(t)["panels"].([]any)
	for _, p := range panels {
		targets, _ := p.(map[string]any)["targets"].([]any)
		for _, tg := range targets {
			if e, ok := tg.(map[string]any)["expr"].(string); ok {
				out = append(out, r.Replace(e))
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("the dashboard has %d queries", len(out))
	}
	return out
}

// TestDashboardQueriesParse runs every dashboard query through promtool (as recording rules), so a
// typo in a panel fails here rather than as an empty panel.
func TestDashboardQueriesParse(t *testing.T) {
	var rs []map[string]string
	for i, e := range dashboardExprs(t) {
		rs = append(rs, map[string]string{"record": fmt.Sprintf("warmd:dashboard_query_%d", i), "expr": e})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rs}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := promtool(t, dir, "check", "rules", "dashboard.yaml"); !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool:\n%s", out)
	}
	// The panels the issue asks for are there.
	var titles []string
	panels, _ := dashboard(t)["panels"].([]any)
	for _, p := range panels {
		titles = append(titles, p.(map[string]any)["title"].(string))
	}
	for _, want := range []string{"Warm nodes per model", "Predicted time to ready", "Startup phase p50", "Compile cache hit ratio", "Bytes fetched per second"} {
		if !slices.Contains(titles, want) {
			t.Errorf("dashboard lacks the panel %q (has %v)", want, titles)
		}
	}
}

// registered returns the name of every metric family warmd registers: the daemon's and the
// extender's, each with its histogram series names.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	metrics.NewExtender(reg, extender.NewIndex(), extender.NewReplicas(0, nil))
	ch := make(chan *prometheus.Desc, 256)
	reg.Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		names[m[1]] = true
	}
	return names
}

// queried returns the metric names an expression uses (identifiers starting warmd_ or the external
// ones named here).
var metricName = regexp.MustCompile(`\b(warmd_[a-z0-9_]+|up|vllm:[a-z0-9_:]+)\b`)

// external are series other software exports that the rules and KEDA query.
var external = map[string]bool{"up": true, "vllm:num_requests_waiting": true}

// TestQueriedMetricsExist: every warmd series the dashboard, the alerts and the KEDA example query
// is registered by pkg/metrics (a histogram's _bucket/_sum/_count by its base name), so a rename
// there breaks this test, not a dashboard in production.
func TestQueriedMetricsExist(t *testing.T) {
	names := registered(t)
	var exprs []string
	exprs = append(exprs, dashboardExprs(t)...)
	pr := find(t, render(t, monitoringSets...), "PrometheusRule", "warmd")
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	for _, g := range groups {
		rs, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rs {
			exprs = append(exprs, fmt.Sprint(r.(map[string]any)["expr"]))
		}
	}
	keda := render(t, "extender.enabled=true", "keda.enabled=true", "keda.scaledObjects[0].name=x",
		"keda.scaledObjects[0].namespace=default", "keda.scaledObjects[0].deployment=x", "keda.scaledObjects[0].model=m")
	for _, d := range keda {
		if d.Obj.GetKind() != "ScaledObject" {
			continue
		}
		triggers, _, _ := unstructured.NestedSlice(d.Obj.Object, "spec", "triggers")
		for _, tr := range triggers {
			q, _, _ := unstructured.NestedString(tr.(map[string]any), "metadata", "query")
			exprs = append(exprs, q)
		}
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, m := range metricName.FindAllString(e, -1) {
			used[m] = true
		}
	}
	var missing []string
	for m := range used {
		base := m
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suf); ok && names[b] {
				base = b
			}
		}
		if !names[base] && !external[m] {
			missing = append(missing, m)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("queried but not registered by pkg/metrics: %v", missing)
	}
	for _, want := range []string{"warmd_model_state", "warmd_predicted_ready_seconds", "warmd_vllm_startup_phase_seconds_bucket", "warmd_compile_cache_starts_total", "warmd_weights_bytes_total"} {
		if !used[want] {
			t.Errorf("no dashboard or alert queries %s", want)
		}
	}
	t.Logf("%d queries use %d series, all registered", len(exprs), len(used))
}

// TestHelmLintAllParts lints the chart with every optional part on.
func TestHelmLintAllParts(t *testing.T) {
	args := []string{"lint", "--strict", chartDir}
	for _, s := range append(slices.Clone(monitoringSets), "extender.enabled=true", "extender.scheduler.enabled=true", "keda.enabled=true",
		"keda.scaledObjects[0].name=x", "keda.scaledObjects[0].namespace=default", "keda.scaledObjects[0].deployment=x", "keda.scaledObjects[0].model=m") {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("1 chart(s) linted, 0 chart(s) failed")) {
		t.Errorf("helm lint:\n%s", out)
	}
}
