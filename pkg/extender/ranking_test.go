package extender

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
)

func predicted(name string, seconds string, mutate func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels:      map[string]string{model.LabelKey(m7b): "weights"},
		Annotations: map[string]string{nodelabels.AnnotationPredicted: `{"` + m7b + `":` + seconds + `}`},
	}}
	if mutate != nil {
		mutate(n)
	}
	return n
}

// TestScoreSlowIsNotNone: however slow, a Node with a prediction outranks one without, and the
// scale keeps its order.
func TestScoreSlowIsNotNone(t *testing.T) {
	ix := NewIndex()
	for _, n := range []*corev1.Node{predicted("fast", "10", nil), predicted("slow", "300", nil), predicted("slower", "3000", nil),
		{ObjectMeta: metav1.ObjectMeta{Name: "none"}}} {
		ix.Upsert(n)
	}
	x := New(Config{}, ix, nil, nil)
	names := []string{"fast", "slow", "slower", "none"}
	got := scores(*x.Prioritize(&extenderv1.ExtenderArgs{Pod: vllmPod(m7b), NodeNames: &names}))
	if got["fast"] != 10 || got["none"] != 0 || got["slow"] < 1 || got["slower"] < 1 || got["slow"] < got["slower"] {
		t.Errorf("scores = %v: want fast 10, slow and slower at least 1 (slow >= slower), none 0", got)
	}
	for _, tc := range []struct {
		ms   int64
		best float64
		want int64
	}{{-1, 10, 0}, {10, 10, 10}, {20, 10, 6}, {40, 10, 3}, {300_000, 10_000, 1}, {0, 0, 10}, {5, 0, 1}} {
		if s := score(tc.ms, tc.best); s != tc.want {
			t.Errorf("score(%d ms, best %v) = %d, want %d", tc.ms, tc.best, s, tc.want)
		}
	}
}

// TestFastestReadySkipsUnusableNodes: the cluster-wide lead time ignores Nodes a new replica cannot
// use: the model failed there, the Node is cordoned, or it is NotReady.
func TestFastestReadySkipsUnusableNodes(t *testing.T) {
	env := kubeenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := []*corev1.Node{
		predicted("fr-failed", "5", func(n *corev1.Node) { n.Labels[model.LabelKey(m7b)] = "failed" }),
		predicted("fr-cordoned", "6", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		predicted("fr-notready", "7", nil),
		predicted("fr-ok", "90", nil),
	}
	for _, n := range nodes {
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nr, err := env.Client.CoreV1().Nodes().Get(ctx, "fr-notready", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nr.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"}}
	if _, err := env.Client.CoreV1().Nodes().UpdateStatus(ctx, nr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ix := NewIndex()
	reg := prometheus.NewRegistry()
	x := New(Config{}, ix, metrics.NewExtender(reg, ix, nil), nil)
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx, env.Client, 0) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the NotReady status in the index", func() bool {
		n, ok := ix.Get("fr-notready")
		return x.Synced() && ix.Len() == 4 && ok && n.Unschedulable
	})
	if got := ix.FastestReady()[m7b]; got != 90 {
		t.Errorf("fastest ready = %v, want 90 (failed, cordoned and NotReady nodes skipped)", got)
	}
	// Uncordon: the Node counts again.
	c, _ := env.Client.CoreV1().Nodes().Get(ctx, "fr-cordoned", metav1.GetOptions{})
	c.Spec.Unschedulable = false
	if _, err := env.Client.CoreV1().Nodes().Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the uncordoned node's lead time", func() bool { return ix.FastestReady()[m7b] == 6 })
	want := `
# HELP warmd_cluster_fastest_ready_seconds Lowest predicted time-to-ready of a new replica over all Nodes (warmd.io/predicted-ready), per model.
# TYPE warmd_cluster_fastest_ready_seconds gauge
warmd_cluster_fastest_ready_seconds{model="Qwen/Qwen2.5-7B-Instruct"} 6
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "warmd_cluster_fastest_ready_seconds"); err != nil {
		t.Error(err)
	}
}

// TestOnlyTheLeaderExportsClusterSeries: two replicas see the same Nodes; one exports the cluster
// series, the other only says it is not the leader.
func TestOnlyTheLeaderExportsClusterSeries(t *testing.T) {
	env := kubeenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "warmd"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ix := NewIndex()
	ix.Upsert(predicted("l-a", "40", func(n *corev1.Node) { n.Labels[model.LabelKey(m7b)] = "warm" }))
	type replica struct {
		reg    *prometheus.Registry
		leader *Leader
		stop   context.CancelFunc
		done   chan error
	}
	start := func(id string) *replica {
		r := &replica{reg: prometheus.NewRegistry(), leader: NewLeader(true), done: make(chan error, 1)}
		metrics.NewExtender(r.reg, ix, nil).SetLeader(r.leader.IsLeader)
		rctx, stop := context.WithCancel(ctx)
		r.stop = stop
		go func() {
			r.done <- r.leader.Run(rctx, env.Client, LeaseOptions{Namespace: "warmd", Name: "warmd-extender", Identity: id,
				LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond}, slog.New(slog.DiscardHandler))
		}()
		return r
	}
	a, b := start("replica-a"), start("replica-b")
	waitFor(t, "one leader", func() bool { return a.leader.IsLeader() != b.leader.IsLeader() })
	lead, other := a, b
	if b.leader.IsLeader() {
		lead, other = b, a
	}
	series := func(r *replica) int {
		n, err := testutil.GatherAndCount(r.reg, "warmd_warm_nodes", "warmd_cluster_fastest_ready_seconds")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if series(lead) != 2 || series(other) != 0 {
		t.Errorf("cluster series: leader %d, other %d; want 2 and 0", series(lead), series(other))
	}
	if v, _ := testutil.GatherAndCount(other.reg, "warmd_extender_leader"); v != 1 {
		t.Errorf("the non-leader exports %d warmd_extender_leader series, want 1", v)
	}
	// The leader stops (a rollout): it releases the Lease and the other takes over.
	lead.stop()
	if err := <-lead.done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "failover", func() bool { return other.leader.IsLeader() && !lead.leader.IsLeader() })
	if series(other) != 2 {
		t.Errorf("new leader exports %d cluster series, want 2", series(other))
	}
	other.stop()
	<-other.done

	if l := NewLeader(false); !l.IsLeader() || l.Run(ctx, nil, LeaseOptions{}, nil) != nil {
		t.Error("without election a replica must export from the start and Run must return at once")
	}
	if err := NewLeader(true).Run(ctx, env.Client, LeaseOptions{Name: "x", Identity: "y"}, nil); err == nil || !strings.Contains(err.Error(), "namespace") {
		t.Errorf("election without a namespace: %v", err)
	}
}

// TestDecisionsAreLogged: a pod with a model gets one info line naming the fastest Node; debug adds
// the top scores; a pod without a model stays at debug.
func TestDecisionsAreLogged(t *testing.T) {
	ix := NewIndex()
	for _, n := range fixtureNodes() {
		ix.Upsert(n)
	}
	var buf bytes.Buffer
	x := New(Config{FilterFailed: true}, ix, nil, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	names := []string{"ext-warm", "ext-weights", "ext-cold", "ext-failed", "ext-nowarmd"}
	pod := vllmPod(m7b)
	x.Prioritize(&extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	x.Filter(&extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}
	x.Prioritize(&extenderv1.ExtenderArgs{Pod: web, NodeNames: &names})
	out := buf.String()
	for _, want := range []string{
		`msg="extender prioritize" pod=llm/p model=Qwen/Qwen2.5-7B-Instruct candidates=5 withPrediction=3 fastestNode=ext-warm fastestScore=10 fastestPredictedSeconds=70`,
		`msg="extender filter" pod=llm/p model=Qwen/Qwen2.5-7B-Instruct candidates=5 filteredOut=1 failedNodes=[ext-failed]`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "default/web") || strings.Contains(out, "topScores") {
		t.Errorf("info level logged debug detail:\n%s", out)
	}
	buf.Reset()
	x = New(Config{}, ix, nil, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	x.Prioritize(&extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	x.Prioritize(&extenderv1.ExtenderArgs{Pod: web, NodeNames: &names})
	if out := buf.String(); !strings.Contains(out, "topScores=\"[ext-warm=10 ext-weights=6 ext-cold=2") || !strings.Contains(out, "pod=default/web") {
		t.Errorf("debug log:\n%s", out)
	}
}
