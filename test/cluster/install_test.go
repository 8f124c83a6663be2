package cluster

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/nvml"
)

// EnvImage names the warmd image `make image IMAGE=...` pushed to the node's registry
// (scripts/cluster/e2e.sh sets it).
const EnvImage = "WARMD_CLUSTER_IMAGE"

const ns = "warmd"

// install installs warmd, its extender and their RBAC as a user would, with the test's NodeConfig and
// S3 credentials, and the extender tolerating the startup taint: on this one-node cluster it must run
// on the cold node to rank it (a real fleet runs it on a CPU node). The node has no GPU: warmd reads a
// recorded H100 inventory (nvml.EnvRecordedInventory, from a ConfigMap) instead of NVML, so its SKU,
// labels and compile-cache tree are a GPU node's; nothing after the inventory differs from production.
func install(ctx context.Context, t *testing.T, w *world, a *applier) {
	t.Helper()
	image := testenv.Require(t, EnvImage, "the warmd image (`make image IMAGE=<node registry>/warmd/warmd:<tag>`): run `make cluster-e2e`;")
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "warmd-s3", Namespace: ns},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": w.c.S3.AccessKey, "AWS_SECRET_ACCESS_KEY": w.c.S3.SecretKey},
	}
	if _, err := w.c.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.c.Clientset.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpu := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "warmd-e2e-gpu", Namespace: ns},
		Data:       map[string]string{"inventory.json": string(readFile(t, "../../pkg/nvml/testdata/recorded-h100x8.json"))},
	}
	if _, err := w.c.Clientset.CoreV1().ConfigMaps(ns).Create(ctx, gpu, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The chart, as an operator installs it: `helm template` with a values file (what `helm install -f`
	// takes), applied server-side. Only the values differ from a production install.
	objs := renderChart(ctx, t, chartValues(t, w, image))
	t.Logf("installing charts/warmd (helm template, %d objects) with image %s", len(objs), image)
	for _, o := range objs {
		if err := a.apply(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// chartValues are the values the e2e installs charts/warmd with; a later step changes some and
// renders the chart again, as `helm upgrade` with an edited values file would.
func chartValues(t *testing.T, w *world, image string) map[string]any {
	t.Helper()
	repo, tag := splitImage(t, image)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(w.nodeConfig(false)), &cfg); err != nil {
		t.Fatal(err)
	}
	values := map[string]any{
		"image":  map[string]any{"repository": repo, "tag": tag},
		"config": cfg,
		"env": []any{secretEnv("AWS_ACCESS_KEY_ID"), secretEnv("AWS_SECRET_ACCESS_KEY"),
			map[string]any{"name": nvml.EnvRecordedInventory, "value": "/etc/warmd-gpu/inventory.json"}},
		"extraVolumes":      []any{map[string]any{"name": "gpu", "configMap": map[string]any{"name": "warmd-e2e-gpu"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "gpu", "mountPath": "/etc/warmd-gpu", "readOnly": true}},
		// The node's containerd keeps its root in the run's temp dir (scripts/cluster/up.sh): mounted
		// at the same path, warmd unpacks the images itself (containerd.unpack: warmd, the default).
		"hostPaths": map[string]any{"containerdRoot": filepath.Join(w.c.Dir, "containerd", "root")},
		// Peers on, as a fleet runs it: the one node is its models' seed, so its fetch takes each model's
		// seed Lease through the chart's Role and admission policy with the kubelet's pod-bound token.
		"peers": map[string]any{"enabled": true},
		"extender": map[string]any{"enabled": true,
			"tolerations": []any{map[string]any{"key": "warmd.io/cold", "operator": "Exists", "effect": "NoSchedule"}}},
	}
	return values
}

// renderChart is `helm template warmd charts/warmd -f values.yaml`, decoded.
func renderChart(ctx context.Context, t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	vb, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	vf := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vf, vb, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, testenv.Helm(t), "template", "warmd", "../../charts/warmd", "--namespace", ns, "-f", vf)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	return decodeAll(t, out)
}

// splitImage splits registry/repo:tag into the chart's image.repository and image.tag.
func splitImage(t *testing.T, image string) (repo, tag string) {
	t.Helper()
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		t.Fatalf("image %q has no tag", image)
	}
	return image[:i], image[i+1:]
}

func secretEnv(key string) map[string]any {
	return map[string]any{"name": key, "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "warmd-s3", "key": key}}}
}

// setContainer sets the image of a workload's first container and appends env to it.
func setContainer(t *testing.T, o *unstructured.Unstructured, image string, env []any) {
	t.Helper()
	cs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if err != nil || len(cs) == 0 {
		t.Fatalf("%s %s has no containers", o.GetKind(), o.GetName())
	}
	c := cs[0].(map[string]any)
	c["image"] = image
	if env != nil {
		old, _ := c["env"].([]any)
		c["env"] = append(old, env...)
	}
	if err := unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
}
