package cluster

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	if _, err := w.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.c.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpu := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "warmd-e2e-gpu", Namespace: ns},
		Data:       map[string]string{"inventory.json": string(readFile(t, "../../pkg/nvml/testdata/recorded-h100x8.json"))},
	}
	if _, err := w.c.Client.CoreV1().ConfigMaps(ns).Create(ctx, gpu, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("../../charts/warmd/Chart.yaml"); err == nil {
		t.Fatal("charts/warmd exists: install it with helm (not written yet)")
	}
	t.Logf("charts/warmd is not in this tree yet: installing from manifests/ and manifests/extender/ with image %s", image)
	objs := append(kustomizeFiles(t, "../../manifests"), kustomizeFiles(t, "../../manifests/extender")...)
	for _, o := range objs {
		switch o.GetKind() + "/" + o.GetName() {
		case "DaemonSet/warmd":
			setContainer(t, o, image, []any{
				secretEnv("AWS_ACCESS_KEY_ID"), secretEnv("AWS_SECRET_ACCESS_KEY"),
				map[string]any{"name": nvml.EnvRecordedInventory, "value": "/etc/warmd-gpu/inventory.json"},
			})
			addVolume(t, o, map[string]any{"name": "gpu", "configMap": map[string]any{"name": "warmd-e2e-gpu"}},
				map[string]any{"name": "gpu", "mountPath": "/etc/warmd-gpu", "readOnly": true})
		case "ConfigMap/warmd-config":
			unstructured.SetNestedField(o.Object, w.nodeConfig(false), "data", "config.yaml")
		case "Deployment/warmd-extender":
			setContainer(t, o, image, nil)
			tol, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "tolerations")
			tol = append(tol, map[string]any{"key": "warmd.io/cold", "operator": "Exists", "effect": "NoSchedule"})
			unstructured.SetNestedSlice(o.Object, tol, "spec", "template", "spec", "tolerations")
		}
		if err := a.apply(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

func secretEnv(key string) map[string]any {
	return map[string]any{"name": key, "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "warmd-s3", "key": key}}}
}

// addVolume adds a volume to a workload and mounts it in its first container.
func addVolume(t *testing.T, o *unstructured.Unstructured, vol, mount map[string]any) {
	t.Helper()
	vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
	if err := unstructured.SetNestedSlice(o.Object, append(vols, vol), "spec", "template", "spec", "volumes"); err != nil {
		t.Fatal(err)
	}
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	c := cs[0].(map[string]any)
	mounts, _ := c["volumeMounts"].([]any)
	c["volumeMounts"] = append(mounts, mount)
	if err := unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
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
