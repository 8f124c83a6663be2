package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/internal/testenv/testcerts"
)

// TestExtenderCommand runs `warmd extender` against a real API server: it becomes ready once the
// Nodes are listed, answers /prioritize, serves /metrics, and stops cleanly when its context ends.
func TestExtenderCommand(t *testing.T) {
	env := kubeenv.Start(t)
	kubeconfig := env.Kubeconfig(t, "extender-cmd", "")
	for name, secs := range map[string]string{"cmd-fast": "70", "cmd-slow": "280"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{"models.warmd.io/org--m": "warm"},
			Annotations: map[string]string{"warmd.io/predicted-ready": `{"org/m":` + secs + `}`}}}
		if _, err := env.Client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var errOut bytes.Buffer
	go func() {
		root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: &errOut})
		root.SetArgs([]string{"extender", "--kubeconfig", kubeconfig, "--listen", addr, "--log-format", "text"})
		done <- root.ExecuteContext(ctx)
	}()
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("extender never became ready: %v\n%s", err, errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	names := []string{"cmd-fast", "cmd-slow"}
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"warmd.io/model": "org/m"}}}, NodeNames: &names})
	resp, err := http.Post(base+"/prioritize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var got extenderv1.HostPriorityList
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || len(got) != 2 || got[0].Score != 10 || got[1].Score != 3 {
		t.Errorf("prioritize = %+v, %v; want cmd-fast 10, cmd-slow 3", got, err)
	}
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`warmd_warm_nodes{model="org/m"} 2`, `warmd_cluster_fastest_ready_seconds{model="org/m"} 70`, `warmd_extender_requests_total{result="ok",verb="prioritize"} 1`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("warmd extender returned %v after its context ended", err)
	}
}

// TestExtenderCommandTLS runs `warmd extender` with the scheduler API over TLS and client
// certificates: the scheduler's certificate gets scores, a client without one is refused in the
// handshake, and /readyz and /metrics answer on the plain --metrics-listen address.
func TestExtenderCommandTLS(t *testing.T) {
	env := kubeenv.Start(t)
	kubeconfig := env.Kubeconfig(t, "extender-tls", "")
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "tls-node",
		Labels:      map[string]string{"models.warmd.io/org--m": "warm"},
		Annotations: map[string]string{"warmd.io/predicted-ready": `{"org/m":70}`}}}
	if _, err := env.Client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	serverCA, clientCA := testcerts.NewCA(t, "server-ca"), testcerts.NewCA(t, "scheduler-ca")
	crt, key := serverCA.Issue(t, "warmd-extender", true)
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": clientCA.PEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr, plain := freeAddr(t), freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var errOut bytes.Buffer
	go func() {
		root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: &errOut})
		root.SetArgs([]string{"extender", "--kubeconfig", kubeconfig, "--listen", addr, "--metrics-listen", plain,
			"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key"),
			"--client-ca-file", filepath.Join(dir, "ca.crt"), "--log-format", "text"})
		done <- root.ExecuteContext(ctx)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + plain + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("extender never became ready on --metrics-listen: %v\n%s", err, errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	names := []string{"tls-node"}
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"warmd.io/model": "org/m"}}}, NodeNames: &names})
	schedCrt, schedKey := clientCA.Issue(t, "kube-scheduler", false)
	resp, err := testcerts.Client(t, serverCA, schedCrt, schedKey).Post("https://"+addr+"/prioritize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the scheduler's certificate was refused: %v\n%s", err, errOut.String())
	}
	var got extenderv1.HostPriorityList
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || len(got) != 1 || got[0].Score != 10 {
		t.Errorf("prioritize over TLS = %+v, %v; want tls-node 10", got, err)
	}
	if resp, err := testcerts.Client(t, serverCA, nil, nil).Post("https://"+addr+"/prioritize", "application/json", bytes.NewReader(body)); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate got %s", resp.Status)
	}
	if resp, err := http.Post("http://"+addr+"/prioritize", "application/json", bytes.NewReader(body)); err == nil && resp.StatusCode == http.StatusOK {
		resp.Body.Close()
		t.Error("plain HTTP was served on the TLS --listen")
	}
	resp, err = http.Get("http://" + plain + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), `warmd_extender_requests_total{result="ok",verb="prioritize"} 1`) {
		t.Errorf("/metrics on --metrics-listen lacks the prioritize request:\n%.2000s", m)
	}
	// A real kube-scheduler calls it over TLS with its client certificate (the chart's tlsConfig) and
	// binds a vLLM pod; the extender counts the scheduler's requests.
	before := promValue(string(m), `warmd_extender_requests_total{result="ok",verb="filter"}`)
	realSchedulerBindsOverTLS(t, env, kubeconfig, dir, addr, serverCA.PEM, schedCrt, schedKey)
	resp, err = http.Get("http://" + plain + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if after := promValue(string(m), `warmd_extender_requests_total{result="ok",verb="filter"}`); after <= before {
		t.Errorf("kube-scheduler bound the pod without calling the TLS extender (filter requests %v, was %v)", after, before)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("warmd extender returned %v after its context ended", err)
	}

	// A client CA without a plain listener is refused at start, by flag.
	root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard})
	root.SetArgs([]string{"extender", "--kubeconfig", kubeconfig, "--listen", freeAddr(t), "--tls-cert-file", filepath.Join(dir, "tls.crt"),
		"--tls-key-file", filepath.Join(dir, "tls.key"), "--client-ca-file", filepath.Join(dir, "ca.crt")})
	if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Errorf("--client-ca-file without --metrics-listen: %v", err)
	}
}

// realSchedulerBindsOverTLS runs the kube-scheduler `make test` builds with an extender entry shaped
// like the chart's (https, enableHTTPS, tlsConfig with the client certificate) and waits for it to
// bind a pod that names a model to the one schedulable Node.
func realSchedulerBindsOverTLS(t *testing.T, env *kubeenv.Env, kubeconfig, dir, addr string, caPEM, crt, key []byte) {
	t.Helper()
	ctx := context.Background()
	for name, b := range map[string][]byte{"sched-ca.crt": caPEM, "sched.crt": crt, "sched.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	node, err := env.Client.CoreV1().Nodes().Get(ctx, "tls-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API server taints a new Node not-ready (TaintNodesByCondition); a kubelet would clear it.
	node.Spec.Taints = nil
	if node, err = env.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10"),
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}
	node.Status.Capacity = node.Status.Allocatable
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	if _, err := env.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
leaderElection:
  leaderElect: false
profiles:
  - schedulerName: default-scheduler
extenders:
  - urlPrefix: https://%s
    enableHTTPS: true
    tlsConfig:
      caFile: %s
      certFile: %s
      keyFile: %s
    filterVerb: filter
    prioritizeVerb: prioritize
    weight: 5
    nodeCacheCapable: true
    ignorable: false
    httpTimeout: 2s
`, kubeconfig, addr, filepath.Join(dir, "sched-ca.crt"), filepath.Join(dir, "sched.crt"), filepath.Join(dir, "sched.key"))
	cfgPath := filepath.Join(dir, "scheduler.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var out bytes.Buffer
	cmd := exec.CommandContext(sctx, filepath.Join(testenv.Assets(t), "kube-scheduler"), "--config", cfgPath, "--secure-port", "0", "-v", "2")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); _ = cmd.Wait() }()

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vllm-tls", Namespace: "default",
		Annotations: map[string]string{"warmd.io/model": "org/m"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}}}
	if _, err := env.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := env.Client.CoreV1().Pods("default").Get(ctx, "vllm-tls", metav1.GetOptions{})
		if err == nil && p.Spec.NodeName == "tls-node" {
			return
		}
		if time.Now().After(deadline) {
			log := out.String()
			log = log[max(0, len(log)-6000):]
			t.Fatalf("kube-scheduler did not bind the pod through the TLS extender in 60s (%v, conditions %+v)\n…%s", err, p.Status.Conditions, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// promValue reads one series' value from a /metrics text (0 when absent).
func promValue(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
