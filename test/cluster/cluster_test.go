// Package cluster is warmd's cluster e2e: warmd installed as users install it, running as a pod on a
// real one-node Kubernetes v1.37.2 (scripts/cluster/up.sh: kubelet on containerd 2.4.2, kube-scheduler,
// kube-controller-manager, kube-apiserver with RBAC, NodeRestriction and the admission policy), and
// checked the way users see it: pod readiness, what its own ServiceAccount may write, a vLLM pod
// scheduled onto the warm node through the real scheduler and extender with its image already present
// and its weights read from warmd's volume, the scheduler placing by the extender's prioritize once a
// second (registered, kubelet-less) Node fits too, the chart's extender over mutual TLS with the chart's own
// second scheduler, the vLLM start measured from the CRI log, a real Prometheus scraping the shipped
// monitors and answering the ScaledObject's queries, the kubelet's
// image GC against warmd's pins, a ConfigMap edit through the projected volume, and a pod restart
// that fetches nothing again. Run alone with `make cluster-e2e`; `make test` runs it too.
package cluster

import (
	"context"
	"testing"
	"time"

	"warmd.io/warmd/internal/testenv/cluster"
)

func TestWarmdOnARealNode(t *testing.T) {
	c := cluster.Require(t)
	c.DumpOnFailure(t, 80)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	t.Logf("node %s (%s), registry %s, S3 %s", c.Node, c.NodeIP, c.Registry, c.S3.Endpoint)

	w := newWorld(t, c)
	a := newApplier(t, c)
	e := &e2e{t: t, c: c, w: w, a: a}
	t.Logf("world ready in %s: images %s (4 layers), %s, %s; models %s (%d bytes), %s", time.Since(start).Round(time.Millisecond),
		w.vllmImage, w.extraImage, w.unpinnedImage, w.qwen7b.name, w.qwen7b.size, w.qwen05b.name)

	steps := []struct {
		name string
		run  func(context.Context, *testing.T)
		// critical steps end the test when they fail: the later ones build on them.
		critical bool
	}{
		{"install/warmd pod becomes Ready when /readyz answers ok", e.installAndReady, true},
		{"own ServiceAccount publishes its Node's labels and condition while the model is missing", e.publishesOwnNode, true},
		{"same token is refused on another Node and for a foreign label", e.tokenConfined, false},
		{"kube-scheduler runs the shipped config with only the extender URL changed", e.mainScheduler, true},
		{"vllm pod waits while the node is cold", e.vllmPendingWhileCold, true},
		{"image and model get warm and the startup taint is removed", e.warmAndUntainted, true},
		{"scheduler with the shipped config and the extender places the vllm pod on the warm node", e.vllmScheduledWarm, true},
		{"with a second Node, kube-scheduler asks the extender's prioritize and places by its ranking", e.schedulerRanks, false},
		{"follower records the vllm start and its phases from the CRI log", e.followerRecordsStart, false},
		{"ServiceMonitors, PodMonitor and ScaledObjects select what exists", e.monitoringSelectsWhatExists, false},
		{"a real Prometheus scrapes the shipped monitors and answers the ScaledObject's queries", e.prometheusAnswersKEDA, false},
		{"second scheduler from the shipped files schedules a warmd-scheduler pod", e.secondScheduler, false},
		{"chart's extender over TLS: its second scheduler asks it with a client certificate, a client without one is refused", e.chartExtenderTLS, false},
		{"ConfigMap edit reaches warmd through the projected volume", e.configMapEdit, false},
		{"deleted warmd pod is recreated and fetches nothing again", e.podRecreated, false},
		{"warmd's Node Events record the failed fetch and the model getting warm", e.nodeEvents, false},
		{"kubelet image GC removes the unpinned image and keeps the pinned ones", e.imageGC, false},
	}
	for _, s := range steps {
		stepStart := time.Now()
		ok := t.Run(s.name, func(t *testing.T) { s.run(ctx, t) })
		t.Logf("step %q: %s in %s", s.name, map[bool]string{true: "passed", false: "FAILED"}[ok], time.Since(stepStart).Round(time.Millisecond))
		if !ok && s.critical {
			t.Fatalf("step %q failed; the later steps need it", s.name)
		}
	}
	t.Logf("cluster e2e: %s", time.Since(start).Round(time.Millisecond))
}

// e2e carries what the steps share.
type e2e struct {
	t *testing.T
	c *cluster.Cluster
	w *world
	a *applier
	// warmdPod is the DaemonSet's current pod; extenderIP one extender pod's IP.
	warmdPod, warmdPodIP, extenderIP string
	// extenderCalls is the extender's answered-request count at the last look.
	extenderCalls float64
	// extenderTLS is set once the chart serves the extender's scheduler API over TLS.
	extenderTLS bool
}
