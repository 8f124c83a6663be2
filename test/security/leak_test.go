package security

// Class 5 at the boundary: nothing from a file's content reaches status, logs or the Node. A checksum
// manifest that is a symlink to a secret (the canary's secret file), a manifest object in the bucket
// holding the secret, and a safetensors header whose tensor names and dtype carry it: each model
// fails, and the secret appears nowhere an operator or anyone who can read Nodes looks: the daemon's
// log, /v1/status, `warmd status` (-o json and the table), and the Node's labels, annotations,
// conditions and Events on a real kube-apiserver.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/prefetch"
)

func TestSecretsNeverReachStatusLogsOrTheNode(t *testing.T) {
	kenv := kubeenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := NewWorld(t)
	secretBytes, err := os.ReadFile(filepath.Join(w.Canary.Path, "secret.txt"))
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(secretBytes))

	// The Node warmd writes to, and a kubeconfig for it.
	const node = "sec-node"
	if _, err := kenv.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := kenv.Kubeconfig(t, "warmd-sec", w.Work)

	// 1. file:// model whose checksum manifest is a symlink to the canary's secret.
	src := filepath.Join(w.Work, "src")
	writeFiles(t, src, SmallModel(t))
	if err := os.Symlink(filepath.Join(w.Canary.Path, "secret.txt"), filepath.Join(src, "SHA256SUMS")); err != nil {
		t.Fatal(err)
	}
	// 2. A bucket whose manifest object is the secret (what a symlinked object in a posix-backed
	// bucket serves), with the secret where a digest belongs.
	b := StubBucket(t)
	w.Env = append(w.Env, b.Env...)
	b.PutModel("m/", SmallModel(t))
	b.Put("m/SHA256SUMS", []byte(secret+"\n"+strings.Repeat("0", 64-len(secret)%64)+secret+"  config.json\n"))
	// 3. A safetensors header carrying the secret as tensor names, a dtype and metadata, with
	// overlapping offsets so it fails validation.
	b.PutModel("st/", map[string][]byte{"config.json": []byte(`{"model_type": "llama"}`),
		"model.safetensors": safetensorsFile(fmt.Sprintf(`{"__metadata__":{"%[1]s":"%[1]s"},"%[1]s-a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"%[1]s-b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}`, secret), 12)})

	models := []string{"sec/file-manifest", "sec/bucket-manifest", "sec/header"}
	cfg := w.Config(map[string]string{
		"s3": b.S3Section(),
		"models": ModelsSection(
			map[string]string{"name": models[0], "source": "file://" + src + "/", "sha256Manifest": "SHA256SUMS"},
			map[string]string{"name": models[1], "source": b.URL("m/"), "sha256Manifest": "SHA256SUMS"},
			map[string]string{"name": models[2], "source": b.URL("st/")}),
		"readiness": fmt.Sprintf("{kubeconfig: %s, resync: 10s}", quoteYAML(kubeconfig)),
	})
	d := w.StartDaemon(cfg)
	for name, st := range d.WaitModels(2*time.Minute, models...) {
		if st.State != prefetch.StateFailed {
			t.Errorf("%s: %s, want failed", name, st.State)
		}
	}

	// The Node: wait until warmd has written its condition for the failed models.
	var n *corev1.Node
	deadline := time.Now().Add(time.Minute)
	for {
		n, err = kenv.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := condition(n, nodelabels.ConditionType); c != nil && c.Reason == "ModelFailed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Node never got a ModelFailed %s condition: %+v\n%s", nodelabels.ConditionType, n.Status.Conditions, tail(d.Log(), 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	nodeJSON, _ := json.Marshal(struct {
		Labels, Annotations map[string]string
		Conditions          []corev1.NodeCondition
	}{n.Labels, n.Annotations, n.Status.Conditions})
	events, err := kenv.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
	if err != nil {
		t.Fatal(err)
	}
	eventsJSON, _ := json.Marshal(events.Items)
	cond := condition(n, nodelabels.ConditionType)
	for _, m := range models {
		if !strings.Contains(cond.Message, m+" failed") {
			t.Errorf("the condition does not say %s failed: %q", m, cond.Message)
		}
	}

	t.Logf("WarmdReady: %s", cond.Message)
	statusJSON := w.Warmd("status", "--socket", w.Socket, "-o", "json")
	statusTable := w.Warmd("status", "--socket", w.Socket)
	texts := map[string]string{
		"the daemon log":        d.Log(),
		"/v1/status":            string(d.StatusJSON()),
		"warmd status -o json":  statusJSON.Output(),
		"warmd status":          statusTable.Output(),
		"the Node":              string(nodeJSON),
		"the Node's Events":     string(eventsJSON),
		"the WarmdReady reason": cond.Message,
	}
	NoLeak(t, secret, texts)
	NoLeak(t, "CANARY-SECRET", texts)
	d.Stop()
	w.Check()
}

func condition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
