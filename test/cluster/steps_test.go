package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/testenv/cluster"
	"warmd.io/warmd/pkg/api"
	modelid "warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/peer/seed"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/prefetch"
)

const vllmNS = "default"

// daemonPod returns warmd's DaemonSet pod on the node (the one not being deleted).
func (e *e2e) daemonPod(ctx context.Context) (*corev1.Pod, error) {
	// This node's: the DaemonSet makes a pod for any Node at once, tokenConfined's kubelet-less one too.
	l, err := e.c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=warmd",
		FieldSelector: "spec.nodeName=" + e.c.Node})
	if err != nil {
		return nil, err
	}
	var live []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		return nil, fmt.Errorf("%d warmd pods on %s (want 1)", len(live), e.c.Node)
	}
	return &live[0], nil
}

// status reads warmd's local API through its socket in the node's data dir (what `warmd status` does).
func (e *e2e) status(ctx context.Context) (*api.RawStatus, error) {
	return api.NewClient(e.c.HostPath("/var/lib/warmd/warmd.sock")).Status(ctx)
}

// metrics fetches warmd's /metrics from inside the node.
func (e *e2e) metrics(ctx context.Context, podIP string) (string, error) {
	code, body, err := httpGetInNode(ctx, e.c, "http://"+podIP+":9400/metrics")
	if err == nil && code != 200 {
		err = fmt.Errorf("/metrics answered %d", code)
	}
	return body, err
}

func (e *e2e) node(ctx context.Context) (*corev1.Node, error) {
	return e.c.Clientset.CoreV1().Nodes().Get(ctx, e.c.Node, metav1.GetOptions{})
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func condition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func (e *e2e) installAndReady(ctx context.Context, t *testing.T) {
	install(ctx, t, e.w, e.a)
	ds, err := e.c.Clientset.AppsV1().DaemonSets(ns).Get(ctx, "warmd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctr := ds.Spec.Template.Spec.Containers[0]
	probe := ctr.ReadinessProbe
	if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != "/readyz" {
		t.Fatalf("the DaemonSet's readinessProbe is %+v, want an httpGet of /readyz", probe)
	}
	port := probe.HTTPGet.Port.IntValue()
	for _, p := range ctr.Ports {
		if p.Name == probe.HTTPGet.Port.String() {
			port = int(p.ContainerPort)
		}
	}
	// Poll /readyz ourselves while the kubelet probes it: a Ready pod must answer ok there.
	var notReady []string
	err = cluster.Eventually(ctx, 3*time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		p, err := e.daemonPod(ctx)
		if err != nil {
			return false, err
		}
		if p.Status.PodIP == "" {
			return false, fmt.Errorf("pod %s: %s", p.Name, podSummary(p))
		}
		code, body, err := httpGetInNode(ctx, e.c, fmt.Sprintf("http://%s:%d/readyz", p.Status.PodIP, port))
		if err != nil && !podReady(p) {
			return false, fmt.Errorf("pod %s: %s; /readyz: %v", p.Name, podSummary(p), err)
		}
		if !podReady(p) {
			if code != 200 {
				notReady = append(notReady, fmt.Sprintf("%d %s", code, strings.TrimSpace(body)))
			}
			return false, fmt.Errorf("pod %s not Ready: %s (/readyz %d)", p.Name, podSummary(p), code)
		}
		if code != 200 {
			t.Errorf("pod %s is Ready but /readyz answers %d %q", p.Name, code, body)
		}
		e.warmdPod, e.warmdPodIP = p.Name, p.Status.PodIP
		return true, nil
	})
	if err != nil {
		t.Fatalf("warmd pod: %v", err)
	}
	st, err := e.status(ctx)
	if err != nil {
		t.Fatalf("warmd is Ready but its local API (warmd status) does not answer: %v", err)
	}
	if len(notReady) > 0 {
		t.Logf("warmd pod %s Ready (IP %s); before that /readyz answered: %s", e.warmdPod, e.warmdPodIP, strings.Join(notReady, "; "))
	} else {
		// /readyz waits for every part's first pass (docs/operations.md); on a fast node that pass can
		// end before the first poll.
		t.Logf("warmd pod %s Ready (IP %s); /readyz answered ok at every poll (status v%d)", e.warmdPod, e.warmdPodIP, st.Version)
	}
}

// vllmDeployment is manifests/examples/vllm-qwen.yaml with only the image swapped for the stand-in and
// the expected weight sums added; its volumes, args, probes and GPU request are the example's.
func (e *e2e) vllmDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(readFile(t, "../../manifests/examples/vllm-qwen.yaml"), &d); err != nil {
		t.Fatal(err)
	}
	c := &d.Spec.Template.Spec.Containers[0]
	c.Image = e.w.vllmImage
	c.Env = append(c.Env, corev1.EnvVar{Name: "STANDIN_SHA256", Value: e.w.qwen7b.sums},
		corev1.EnvVar{Name: "STANDIN_REQUESTS_WAITING", Value: strconv.Itoa(standinWaiting)})
	return &d
}

func (e *e2e) vllmPendingWhileCold(ctx context.Context, t *testing.T) {
	// The example asks for one nvidia.com/gpu: advertise eight, as a device plugin on an 8-GPU node would.
	patch := []byte(`{"status":{"capacity":{"nvidia.com/gpu":"8"}}}`)
	if _, err := e.c.Clientset.CoreV1().Nodes().Patch(ctx, e.c.Node, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Eventually(ctx, 30*time.Second, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		n, err := e.node(ctx)
		if err != nil {
			return false, err
		}
		q := n.Status.Allocatable[corev1.ResourceName("nvidia.com/gpu")]
		return q.Cmp(resource.MustParse("8")) == 0, nil
	}); err != nil {
		t.Fatalf("node allocatable nvidia.com/gpu: %v", err)
	}
	d := e.vllmDeployment(t)
	if _, err := e.c.Clientset.AppsV1().Deployments(vllmNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod string
	err := cluster.Eventually(ctx, time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		l, err := e.c.Clientset.CoreV1().Pods(vllmNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + d.Name})
		if err != nil || len(l.Items) == 0 {
			return false, fmt.Errorf("no pod yet (%v)", err)
		}
		p := l.Items[0]
		pod = p.Name
		if p.Spec.NodeName != "" {
			t.Fatalf("pod %s was scheduled to %s while the node is cold", p.Name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			// The message says "untolerated taint(s)"; the node's only taint is the startup taint (checked below).
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "untolerated taint") {
				t.Logf("pod %s Pending: %s", p.Name, c.Message)
				return true, nil
			}
		}
		return false, fmt.Errorf("pod %s: %s", p.Name, podSummary(&p))
	})
	if err != nil {
		t.Fatalf("vllm pod should be Pending on the startup taint: %v", err)
	}
	n, err := e.node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != nodelabels.TaintCold {
		t.Errorf("the node's taints are %v; want only the startup taint %s", n.Spec.Taints, nodelabels.TaintCold)
	}
	ev, _ := events(ctx, e.c, vllmNS, "Pod", pod)
	for _, x := range ev {
		if x.Reason == "FailedScheduling" {
			t.Logf("event %s: %s", x.Reason, x.Message)
		}
	}
}

func (e *e2e) publishesOwnNode(ctx context.Context, t *testing.T) {
	key := modelid.LabelKey(e.w.qwen7b.name)
	var n *corev1.Node
	err := cluster.Eventually(ctx, 2*time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		var err error
		if n, err = e.node(ctx); err != nil {
			return false, err
		}
		cond := condition(n, nodelabels.ConditionType)
		_, hasModel := n.Labels[key]
		_, hasWarm := n.Labels[nodelabels.LabelWarm]
		if cond == nil || !hasModel || !hasWarm {
			return false, fmt.Errorf("labels %v, condition %v", n.Labels, cond)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("Node %s: %v", e.c.Node, err)
	}
	cond := condition(n, nodelabels.ConditionType)
	t.Logf("Node %s: %s=%s %s=%s, condition %s=%s (%s: %s)", n.Name, key, n.Labels[key], nodelabels.LabelWarm, n.Labels[nodelabels.LabelWarm],
		cond.Type, cond.Status, cond.Reason, cond.Message)
	// The model is not in S3 yet: nothing may claim warmth, and the startup taint stays.
	if n.Labels[key] == "warm" || n.Labels[nodelabels.LabelWarm] == "true" || cond.Status == corev1.ConditionTrue {
		t.Errorf("the model is not in S3 yet, but the Node says warm: %s=%s %s=%s %s=%s", key, n.Labels[key],
			nodelabels.LabelWarm, n.Labels[nodelabels.LabelWarm], cond.Type, cond.Status)
	}
	if !hasTaint(n, nodelabels.TaintCold) {
		t.Errorf("the startup taint %s is gone while the node is cold: %v", nodelabels.TaintCold, n.Spec.Taints)
	}
	// The writes came from warmd's pod-bound ServiceAccount token (the admission policy's node name).
	claims := e.tokenClaims(ctx, t)
	if claims.Sub != "system:serviceaccount:warmd:warmd" || claims.K8s.Node.Name != e.c.Node || claims.K8s.Pod.Name != e.warmdPod {
		t.Errorf("warmd's token: sub %q node %q pod %q; want system:serviceaccount:warmd:warmd, %s, %s",
			claims.Sub, claims.K8s.Node.Name, claims.K8s.Pod.Name, e.c.Node, e.warmdPod)
	}
}

// tokenClaims are the parts of a projected ServiceAccount token the admission policy relies on.
type tokenClaims struct {
	Sub string `json:"sub"`
	K8s struct {
		Node struct {
			Name string `json:"name"`
		} `json:"node"`
		Pod struct {
			Name string `json:"name"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}

// token reads the ServiceAccount token the kubelet projected into warmd's pod (kube-api-access-*, a
// tmpfs the kubelet mounted inside the node, so it is read there).
func (e *e2e) token(ctx context.Context, t *testing.T) string {
	t.Helper()
	p, err := e.daemonPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.c.InNode(ctx, nil, "sh", "-c", fmt.Sprintf("cat /var/lib/kubelet/pods/%s/volumes/kubernetes.io~projected/kube-api-access-*/token", p.UID))
	if err != nil {
		t.Fatalf("warmd pod %s's projected token: %v", p.Name, err)
	}
	return strings.TrimSpace(string(out))
}

func (e *e2e) tokenClaims(ctx context.Context, t *testing.T) tokenClaims {
	t.Helper()
	parts := strings.Split(e.token(ctx, t), ".")
	if len(parts) != 3 {
		t.Fatal("warmd's token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c tokenClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *e2e) tokenConfined(ctx context.Context, t *testing.T) {
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other-gpu-node", Labels: map[string]string{"kubernetes.io/hostname": "other-gpu-node"}}}
	if _, err := e.c.Clientset.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// A Node without a kubelet: gone again before anything is scheduled.
	t.Cleanup(func() {
		_ = e.c.Clientset.CoreV1().Nodes().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	})
	cfg := rest.AnonymousClientConfig(e.c.Config)
	cfg.BearerToken = e.token(ctx, t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	label := func(node, key, value string) error {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
		_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	// Control: the token works, for warmd's own keys on its own Node.
	if err := label(e.c.Node, "warmd.io/e2e-probe", "1"); err != nil {
		t.Fatalf("warmd's token may not even set a warmd.io/ label on its own Node: %v", err)
	}
	if err := label(e.c.Node, "warmd.io/e2e-probe", ""); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, node, key, want string }{
		{"another Node", other.Name, "warmd.io/warm", "may not modify Node " + other.Name},
		{"a foreign label on its own Node", e.c.Node, "team", "may only change labels under warmd.io/"},
	} {
		err := label(c.node, c.key, "e2e")
		switch {
		case err == nil:
			t.Errorf("warmd's token set %s on %s (%s): want it refused", c.key, c.node, c.what)
		case !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) || !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: refused with %v; want the admission policy's %q", c.what, err, c.want)
		default:
			t.Logf("%s refused: %v", c.what, err)
		}
	}
}

func (e *e2e) warmAndUntainted(ctx context.Context, t *testing.T) {
	e.w.upload(t, e.w.qwen7b)
	t.Logf("uploaded %s to s3://%s/%s/ (%d bytes); warmd retries the failed fetch", e.w.qwen7b.name, e.w.qwen7b.bucket, e.w.qwen7b.prefix, e.w.qwen7b.size)
	key := modelid.LabelKey(e.w.qwen7b.name)
	start := time.Now()
	err := cluster.Eventually(ctx, 3*time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		n, err := e.node(ctx)
		if err != nil {
			return false, err
		}
		cond := condition(n, nodelabels.ConditionType)
		if n.Labels[key] != "warm" || cond == nil || cond.Status != corev1.ConditionTrue || hasTaint(n, nodelabels.TaintCold) {
			return false, fmt.Errorf("%s=%q condition %v taints %v", key, n.Labels[key], cond, n.Spec.Taints)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("Node %s: %v", e.c.Node, err)
	}
	t.Logf("Node %s warm for %s and untainted %s after the upload", e.c.Node, e.w.qwen7b.name, time.Since(start).Round(time.Second))
	// What the label claims is true: pinned in the kubelet's containerd, weights in the HF layout.
	out, err := e.c.Ctr(ctx, "images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{e.w.vllmImage, e.w.extraImage} {
		if !pinned(string(out), ref) {
			t.Errorf("%s is not pinned in the node's containerd:\n%s", ref, out)
		}
	}
	// warmd unpacked the images itself, onto the snapshots the kubelet's pods then run from.
	st, err := e.status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ims, _, err := prefetch.ImagesSection.Decode(st.Sections)
	if err != nil {
		t.Fatal(err)
	}
	if ims.Backend.Path != "warmd" {
		t.Errorf("images backend path %q (%s), want warmd: the chart mounts the node's containerd root", ims.Backend.Path, ims.Backend.Detail)
	}
	for _, im := range ims.Images {
		if len(im.Unpacked) == 0 || im.Unpacked[0].By != "warmd" {
			t.Errorf("image %s: unpacked %+v, want its layers unpacked by warmd", im.Ref, im.Unpacked)
		}
	}
	// With peers on and no warm peer, warmd took the model's seed Lease as its node before reading the
	// origin (the chart's Role and warmd-seed-leases policy let exactly that through), and keeps it
	// named after publishing.
	lease, err := e.c.Clientset.CoordinationV1().Leases(ns).Get(ctx, seed.Name(e.w.qwen7b.name, e.w.qwen7b.revision), metav1.GetOptions{})
	if err != nil {
		t.Errorf("the model's seed Lease: %v", err)
	} else if h := lease.Spec.HolderIdentity; h == nil || *h != e.c.Node || lease.Labels[seed.LabelPart] != "warmd" || lease.Spec.RenewTime == nil {
		t.Errorf("seed Lease %s: holder %v, labels %v, renewed %v; want held by %s", lease.Name, h, lease.Labels, lease.Spec.RenewTime, e.c.Node)
	} else {
		t.Logf("seed Lease %s held by %s, renewed %s", lease.Name, *h, lease.Spec.RenewTime.Format(time.RFC3339))
	}
	snap := e.c.HostPath(fmt.Sprintf("/var/lib/warmd/weights/models--%s/snapshots/%s", strings.ReplaceAll(e.w.qwen7b.name, "/", "--"), e.w.qwen7b.revision))
	if _, err := os.Stat(snap); err != nil {
		t.Errorf("the model's snapshot is not where the example Deployment reads it: %v", err)
	}
}

// pinned says whether `ctr images ls` shows ref with the CRI's pinned label.
func pinned(ls, ref string) bool {
	for _, line := range strings.Split(ls, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == ref {
			return strings.Contains(line, "io.cri-containerd.pinned=pinned")
		}
	}
	return false
}

func (e *e2e) vllmScheduledWarm(ctx context.Context, t *testing.T) {
	d := e.vllmDeployment(t)
	pods, err := waitPodsReady(ctx, e.c, vllmNS, "app.kubernetes.io/name="+d.Name, 1, 2*time.Minute)
	if err != nil {
		t.Fatalf("vllm pod: %v", err)
	}
	p := pods[0]
	if p.Spec.NodeName != e.c.Node {
		t.Errorf("vllm pod on %q, want %s", p.Spec.NodeName, e.c.Node)
	}
	ev, err := events(ctx, e.c, vllmNS, "Pod", p.Name)
	if err != nil {
		t.Fatal(err)
	}
	var present bool
	for _, x := range ev {
		switch {
		case x.Reason == "Scheduled":
			t.Logf("event Scheduled (%s): %s", x.Source.Component+x.ReportingController, x.Message)
		case x.Reason == "Pulling":
			t.Errorf("the kubelet pulled the image although warmd had it: %s", x.Message)
		case x.Reason == "Pulled":
			present = strings.Contains(x.Message, "already present on machine")
			t.Logf("event Pulled: %s", x.Message)
		}
	}
	if !present {
		t.Errorf("no Pulled event saying the image was already present on machine: %v", reasons(ev))
	}
	// The stand-in read every weight file from the example's volume and checked its sha256.
	logs, err := e.c.Clientset.CoreV1().Pods(vllmNS).GetLogs(p.Name, &corev1.PodLogOptions{Container: "vllm"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "standin: weights verified") {
		t.Errorf("the vllm stand-in did not verify the weights; its log ends:\n%s", tail(string(logs), 10))
	} else {
		t.Logf("vllm pod %s: %s", p.Name, firstLineWith(string(logs), "standin: weights verified"))
	}
	e.assertExtenderCalled(ctx, t, "the vllm pod")
}

func reasons(ev []corev1.Event) []string {
	var out []string
	for _, e := range ev {
		out = append(out, e.Reason)
	}
	return out
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func firstLineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

func (e *e2e) followerRecordsStart(ctx context.Context, t *testing.T) {
	d := e.vllmDeployment(t)
	var rec *phases.Record
	err := cluster.Eventually(ctx, 2*time.Minute, 2*time.Second, func(ctx context.Context) (bool, error) {
		st, err := e.status(ctx)
		if err != nil {
			return false, err
		}
		s, _, err := phases.Section.Decode(st.Sections)
		if err != nil {
			return false, err
		}
		for i, r := range s.Records {
			if r.Namespace == vllmNS && strings.HasPrefix(r.Pod, d.Name+"-") {
				rec = &s.Records[i]
				return true, nil
			}
		}
		return false, fmt.Errorf("%d records, %d following, problems %v", len(s.Records), s.Following, s.Problems)
	})
	if err != nil {
		t.Fatalf("warmd recorded no start of the vllm pod: %v", err)
	}
	var names []string
	for _, p := range rec.Result.Phases {
		names = append(names, fmt.Sprintf("%s %.2fs", p.Name, p.Seconds))
	}
	t.Logf("recorded %s/%s#%d model %q outcome %s from %s: %s", rec.Namespace, rec.Pod, rec.Restart, rec.Model, rec.Result.Outcome, rec.Log, strings.Join(names, ", "))
	if rec.Model != e.w.qwen7b.name {
		t.Errorf("record model %q, want %q", rec.Model, e.w.qwen7b.name)
	}
	if len(rec.Result.Phases) < 3 {
		t.Errorf("only %d phases recorded from a full cold start log", len(rec.Result.Phases))
	}
	if !strings.HasPrefix(rec.Log, "/var/log/pods/"+vllmNS+"_"+rec.Pod+"_") {
		t.Errorf("record read %s, not the kubelet's CRI log under /var/log/pods", rec.Log)
	}
	m, err := e.metrics(ctx, e.warmdPodIP)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := metricSum(m, "warmd_vllm_starts_total"); v < 1 {
		t.Errorf("warmd_vllm_starts_total = %v after a recorded start", v)
	}
}

func (e *e2e) configMapEdit(ctx context.Context, t *testing.T) {
	e.w.upload(t, e.w.qwen05b)
	before, err := e.daemonPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dataLink := e.c.HostPath(fmt.Sprintf("/var/lib/kubelet/pods/%s/volumes/kubernetes.io~configmap/config/..data", before.UID))
	linkBefore, err := os.Readlink(dataLink)
	if err != nil {
		t.Fatalf("the config volume is not the kubelet's atomic-writer layout: %v", err)
	}
	cm, err := e.c.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, "warmd-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["config.yaml"] = e.w.nodeConfig(true)
	if _, err := e.c.Clientset.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	key := modelid.LabelKey(e.w.qwen05b.name)
	err = cluster.Eventually(ctx, 3*time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		n, err := e.node(ctx)
		if err != nil {
			return false, err
		}
		if n.Labels[key] != "warm" {
			return false, fmt.Errorf("%s=%q", key, n.Labels[key])
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the added model: %v", err)
	}
	linkAfter, _ := os.Readlink(dataLink)
	t.Logf("%s warm %s after the edit; ..data %s -> %s", e.w.qwen05b.name, time.Since(edited).Round(time.Second), linkBefore, linkAfter)
	if linkAfter == linkBefore {
		t.Errorf("the kubelet did not swap ..data (still %s)", linkBefore)
	}
	after, err := e.daemonPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID || after.Status.ContainerStatuses[0].RestartCount != before.Status.ContainerStatuses[0].RestartCount {
		t.Errorf("warmd restarted to take the edit (pod %s restarts %d, was %s restarts %d)", after.UID,
			after.Status.ContainerStatuses[0].RestartCount, before.UID, before.Status.ContainerStatuses[0].RestartCount)
	}
	m, err := e.metrics(ctx, e.warmdPodIP)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := metricSum(m, "warmd_config_reloads_total", `result="applied"`); v < 1 {
		t.Errorf("warmd_config_reloads_total{result=\"applied\"} = %v after the edit", v)
	}
}

func (e *e2e) podRecreated(ctx context.Context, t *testing.T) {
	old, err := e.daemonPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.Clientset.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	var p *corev1.Pod
	err = cluster.Eventually(ctx, 2*time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		var err error
		if p, err = e.daemonPod(ctx); err != nil {
			return false, err
		}
		if p.UID == old.UID || !podReady(p) {
			return false, fmt.Errorf("pod %s: %s", p.Name, podSummary(p))
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the DaemonSet did not recreate warmd's pod: %v", err)
	}
	e.warmdPod, e.warmdPodIP = p.Name, p.Status.PodIP
	t.Logf("DaemonSet recreated %s as %s, Ready %s after the delete", old.Name, p.Name, time.Since(deleted).Round(time.Second))
	// Once the new pod has looked at everything (both models warm again in its status), it fetched nothing.
	keys := []string{modelid.LabelKey(e.w.qwen7b.name), modelid.LabelKey(e.w.qwen05b.name)}
	var m string
	err = cluster.Eventually(ctx, 2*time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		if m, err = e.metrics(ctx, p.Status.PodIP); err != nil {
			return false, err
		}
		warm, _ := metricSum(m, "warmd_node_warm")
		if warm != 1 {
			return false, fmt.Errorf("warmd_node_warm %v", warm)
		}
		n, err := e.node(ctx)
		if err != nil {
			return false, err
		}
		for _, k := range keys {
			if n.Labels[k] != "warm" {
				return false, fmt.Errorf("%s=%q", k, n.Labels[k])
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	wb, _ := metricSum(m, "warmd_weights_bytes_total")
	ib, _ := metricSum(m, "warmd_image_bytes_total")
	t.Logf("new pod: warmd_weights_bytes_total %v, warmd_image_bytes_total %v", wb, ib)
	if wb != 0 || ib != 0 {
		t.Errorf("the recreated pod fetched again: %v weight bytes, %v image bytes", wb, ib)
	}
}
