package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/internal/testenv/cluster"
	"warmd.io/warmd/internal/testenv/testcerts"
)

// extenderHost is the name the chart's second scheduler calls the extender by (its Service's DNS
// name), and so the name the extender's server certificate must carry.
const extenderHost = "warmd-extender." + ns + ".svc"

// chartExtenderTLS turns on the chart's TLS for the extender and the chart's own second scheduler,
// as an operator would with `helm upgrade` and extender.tls.enabled, extender.scheduler.enabled: two
// Secrets from a throwaway PKI (the extender's server certificate names the Service; the scheduler's
// client certificate comes from another CA, the one the extender trusts), the chart rendered again
// and applied. Then, against the running extender: a client that verifies the server and presents the
// scheduler's certificate gets an HTTP answer, one without a client certificate is refused in the
// handshake, /metrics answers on the plain port; and the chart's second scheduler, its config as
// rendered, places a vLLM pod after asking the extender (its answered-request count grows — the
// extender entry is ignorable, so a pod placed alone proves nothing). The node has no cluster DNS:
// the scheduler pod gets a hostAliases entry for the Service name, the only change to the chart's
// objects.
func (e *e2e) chartExtenderTLS(ctx context.Context, t *testing.T) {
	// The shipped second scheduler of the step before serves the same profile: take it and its pod
	// away first (two schedulers of one profile race; the chart's replaces it by name anyway).
	for _, d := range []struct{ ns, name string }{{vllmNS, "vllm-second-scheduler"}, {ns, "warmd-scheduler"}} {
		e.c.Clientset.AppsV1().Deployments(d.ns).Delete(ctx, d.name, metav1.DeleteOptions{})
	}
	if err := cluster.Eventually(ctx, time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		l, err := e.c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=warmd-scheduler"})
		return err == nil && len(l.Items) == 0, fmt.Errorf("the shipped second scheduler's pods still exist (%v)", err)
	}); err != nil {
		t.Fatal(err)
	}

	serverCA, clientCA := testcerts.NewCA(t, "e2e extender server CA"), testcerts.NewCA(t, "e2e scheduler client CA")
	srvCrt, srvKey := serverCA.IssueServer(t, "warmd-extender", extenderHost)
	cliCrt, cliKey := clientCA.Issue(t, "warmd-scheduler", false)
	for name, data := range map[string]map[string][]byte{
		"warmd-extender-tls":              {"tls.crt": srvCrt, "tls.key": srvKey, "ca.crt": clientCA.PEM},
		"warmd-scheduler-extender-client": {"tls.crt": cliCrt, "tls.key": cliKey, "ca.crt": serverCA.PEM},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: corev1.SecretTypeTLS, Data: data}
		if _, err := e.c.Clientset.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	values := chartValues(t, e.w, testenv.Require(t, EnvImage, "the warmd image: run `make cluster-e2e`;"))
	ext := values["extender"].(map[string]any)
	ext["tls"] = map[string]any{"enabled": true}
	ext["scheduler"] = map[string]any{"enabled": true, "image": e.w.schedulerImage}
	var sched *unstructured.Unstructured
	for _, o := range renderChart(ctx, t, values) {
		if o.GetKind() == "Deployment" && o.GetName() == "warmd-scheduler" {
			sched = o // applied once the extender answers over TLS and its pod IP is known
			continue
		}
		if err := e.a.apply(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if sched == nil {
		t.Fatal("charts/warmd with extender.scheduler.enabled renders no warmd-scheduler Deployment")
	}
	e.extenderTLS = true
	if err := waitRollout(ctx, e.c, ns, "warmd-extender", 2*time.Minute); err != nil {
		t.Fatalf("extender with TLS: %v", err)
	}
	e.extenderReady(ctx, t)
	e.checkExtenderHandshake(ctx, t, cliCrt, cliKey, serverCA.PEM)

	hosts := []any{map[string]any{"ip": e.extenderIP, "hostnames": []any{extenderHost}}}
	if err := unstructured.SetNestedSlice(sched.Object, hosts, "spec", "template", "spec", "hostAliases"); err != nil {
		t.Fatal(err)
	}
	if err := e.a.apply(ctx, sched); err != nil {
		t.Fatal(err)
	}
	if err := waitRollout(ctx, e.c, ns, "warmd-scheduler", 2*time.Minute); err != nil {
		t.Fatalf("the chart's second scheduler: %v", err)
	}
	if _, err := waitPodsReady(ctx, e.c, ns, "app.kubernetes.io/name=warmd-scheduler", 1, 2*time.Minute); err != nil {
		t.Fatalf("the chart's second scheduler: %v", err)
	}
	e.extenderCalls = e.extenderRequests(ctx, t)
	e.scheduledBySecond(ctx, t, "vllm-tls-scheduler")
	e.assertExtenderCalled(ctx, t, "the pod the chart's second scheduler placed over TLS")
}

// checkExtenderHandshake calls the extender from inside the node with curl, verifying its server
// certificate for the Service name: with the scheduler's client certificate the TLS handshake
// completes (any HTTP status), without one it must fail; /metrics answers on plain 8889.
func (e *e2e) checkExtenderHandshake(ctx context.Context, t *testing.T, crt, key, serverCA []byte) {
	t.Helper()
	dir := filepath.Join(e.c.Dir, "e2e-tls") // the run's temp dir, which the node shares
	for name, data := range map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": serverCA} {
		if err := e.c.WriteNodeFile(ctx, dir+"/"+name, data); err != nil {
			t.Fatal(err)
		}
	}
	url := "https://" + extenderHost + ":8888/filter"
	base := []string{"curl", "-s", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}",
		"--cacert", dir + "/ca.crt", "--resolve", fmt.Sprintf("%s:8888:%s", extenderHost, e.extenderIP)}
	out, err := e.c.InNode(ctx, nil, append(base, "--cert", dir+"/tls.crt", "--key", dir+"/tls.key", url)...)
	if err != nil {
		t.Errorf("the scheduler's client certificate did not get through the extender's TLS: %v", err)
	} else {
		t.Logf("with the scheduler's client certificate: TLS handshake done, GET /filter answered %s", out)
	}
	if out, err := e.c.InNode(ctx, nil, append(base, url)...); err == nil {
		t.Errorf("a client without a certificate got an answer from the TLS extender (HTTP %s); want the handshake refused", out)
	} else {
		t.Logf("without a client certificate: refused (%v)", err)
	}
	if code, _, err := httpGetInNode(ctx, e.c, fmt.Sprintf("http://%s:8889/metrics", e.extenderIP)); err != nil || code != 200 {
		t.Errorf("the extender's plain metrics port: %d %v", code, err)
	}
}

// waitRollout waits until Deployment ns/name runs its current template on every replica: observed,
// updated, ready and available, and no pod of an older template left.
func waitRollout(ctx context.Context, c *cluster.Cluster, ns, name string, timeout time.Duration) error {
	return cluster.Eventually(ctx, timeout, time.Second, func(ctx context.Context) (bool, error) {
		d, err := c.Clientset.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		done := s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want &&
			s.ReadyReplicas == want && s.AvailableReplicas == want
		return done, fmt.Errorf("rollout of %s/%s: generation %d observed %d, replicas %d updated %d ready %d available %d of %d",
			ns, name, d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, want)
	})
}
