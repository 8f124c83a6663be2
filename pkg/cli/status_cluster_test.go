package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/status"
)

// TestStatusCluster runs `warmd status --cluster` against a real API server holding Nodes labelled
// the way warmd's daemons label them.
func TestStatusCluster(t *testing.T) {
	env := kubeenv.Start(t)
	kubeconfig := env.Kubeconfig(t, "status-cluster", "")
	node := func(name, sku, warm string, labels, ann map[string]string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"warmd.io/gpu.sku": sku, "warmd.io/warm": warm}, Annotations: ann}}
		for k, v := range labels {
			n.Labels[k] = v
		}
		return n
	}
	for _, n := range []*corev1.Node{
		node("sc-h100-a", "h100", "true", map[string]string{"models.warmd.io/Qwen--Qwen2.5-7B-Instruct": "warm"}, map[string]string{
			"warmd.io/predicted-ready": `{"Qwen/Qwen2.5-7B-Instruct":70}`,
			"warmd.io/status":          `{"v":1,"warm":true,"sku":"h100","models":{"Qwen/Qwen2.5-7B-Instruct":{"s":"warm"}}}`,
		}),
		node("sc-h100-b", "h100", "false", map[string]string{"models.warmd.io/Qwen--Qwen2.5-7B-Instruct": "image"}, map[string]string{
			"warmd.io/predicted-ready": `{"Qwen/Qwen2.5-7B-Instruct":431}`,
			"warmd.io/status":          `{"v":1,"warm":false,"sku":"h100","models":{"Qwen/Qwen2.5-7B-Instruct":{"s":"image","miss":["weights","compile cache"]}}}`,
		}),
		node("sc-a100-a", "a100", "false", map[string]string{"models.warmd.io/Qwen--Qwen2.5-7B-Instruct": "weights"}, nil),
	} {
		if _, err := env.Client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
		root.SetArgs(append([]string{"status", "--cluster", "--kubeconfig", kubeconfig}, args...))
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("warmd status --cluster %v: %v (%s)", args, err, errOut.String())
		}
		return out.String()
	}
	t.Run("table, fastest first", func(t *testing.T) {
		out := run(t)
		t.Logf("\n%s", out)
		a, b, c := strings.Index(out, "sc-h100-a"), strings.Index(out, "sc-h100-b"), strings.Index(out, "sc-a100-a")
		if a < 0 || b < a || c < b {
			t.Errorf("want rows h100-a (70s), h100-b (431s), a100-a (no prediction) in that order:\n%s", out)
		}
		for _, want := range []string{"READY IN", "1m10s", "7m11s", "weights"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("wide shows what is missing", func(t *testing.T) {
		out := run(t, "-o", "wide")
		if !strings.Contains(out, "weights, compile cache") || !strings.Contains(out, "NODE WARM") {
			t.Errorf("wide output:\n%s", out)
		}
	})
	t.Run("json filtered by sku", func(t *testing.T) {
		var rows []status.ClusterRow
		if err := json.Unmarshal([]byte(run(t, "--sku", "h100", "-o", "json")), &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) != 2 || rows[0].Node != "sc-h100-a" || rows[0].PredictedSeconds == nil || *rows[0].PredictedSeconds != 70 || !rows[0].NodeWarm {
			t.Errorf("rows = %+v", rows)
		}
	})
	t.Run("model filter with no match", func(t *testing.T) {
		if out := run(t, "--model", "nope/none"); !strings.Contains(out, "no Node carries warmd labels") {
			t.Errorf("output:\n%s", out)
		}
	})
	t.Run("bad format is refused", func(t *testing.T) {
		root := NewRootCommand(IOStreams{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}})
		root.SetArgs([]string{"status", "--cluster", "-o", "svg"})
		if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "wide") {
			t.Errorf("err = %v", err)
		}
	})
}
