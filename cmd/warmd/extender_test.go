package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/cli"
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
		root := newRootCommand(cli.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: &errOut})
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
