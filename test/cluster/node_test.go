package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/testenv/cluster"
	"warmd.io/warmd/pkg/nodelabels"
)

// TestNodeRunsPods checks the cluster itself, with no warmd: the Node registered with the startup
// taint, reports the kubelet's version, and runs a pod that tolerates the taint (image pulled by the
// kubelet from the node's registry, sandbox from the local pause image, bridge CNI address, a
// ServiceAccount token from the controller-manager, its log through the API server).
func TestNodeRunsPods(t *testing.T) {
	c := cluster.Require(t)
	c.DumpOnFailure(t, 60)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, err := c.Clientset.CoreV1().Nodes().Get(ctx, c.Node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasTaint(n, nodelabels.TaintCold) {
		t.Errorf("Node %s registered without the startup taint %s: %v", c.Node, nodelabels.TaintCold, n.Spec.Taints)
	}
	t.Logf("Node %s: kubelet %s, %s, %s, taints %v", n.Name, n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.ContainerRuntimeVersion,
		n.Status.NodeInfo.OSImage, n.Spec.Taints)
	if n.Status.NodeInfo.KubeletVersion != "v1.37.2" {
		t.Errorf("kubelet version %q, want v1.37.2", n.Status.NodeInfo.KubeletVersion)
	}

	image := c.Registry + "/e2e/node-smoke:v1"
	pushImage(t, image, [][]tarFile{{{"standin", buildStandin(t), 0o755}}, {{"replay/vllm.log", readFile(t, replayedLog), 0o644}}},
		[]string{"/standin"})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "node-smoke", Namespace: "default", Labels: map[string]string{"app.kubernetes.io/name": "node-smoke"}},
		Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{{Key: nodelabels.TaintCold, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "smoke", Image: image, Args: []string{"--model", "/replay", "--speed", "1000"},
				// The replayed log is the only "weight" file here; its sum is checked like a model's.
				Env:            []corev1.EnvVar{{Name: "STANDIN_SHA256", Value: sha256Line(readFile(t, replayedLog), "vllm.log")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intOrString(8000)}}, PeriodSeconds: 1},
			}},
		},
	}
	start := time.Now()
	if _, err := c.Clientset.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := waitPodsReady(ctx, c, "default", "app.kubernetes.io/name=node-smoke", 1, 2*time.Minute)
	if err != nil {
		t.Fatalf("pod: %v", err)
	}
	p := pods[0]
	t.Logf("pod %s Ready on %s (IP %s) %s after create", p.Name, p.Spec.NodeName, p.Status.PodIP, time.Since(start).Round(time.Millisecond))
	if p.Spec.NodeName != c.Node || !strings.HasPrefix(p.Status.PodIP, "10.88.") {
		t.Errorf("pod on %q with IP %q; want %s and an address of the bridge CNI's 10.88.0.0/16", p.Spec.NodeName, p.Status.PodIP, c.Node)
	}
	logs, err := c.Clientset.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("pod log through the API server and kubelet: %v", err)
	}
	if !strings.Contains(string(logs), "Starting vLLM API server") || !strings.Contains(string(logs), "standin: weights verified") {
		t.Errorf("pod log lacks the replayed vLLM start or the check; it ends:\n%s", tail(string(logs), 10))
	}
	if err := c.Clientset.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
