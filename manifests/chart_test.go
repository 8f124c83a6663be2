package manifests_test

import (
	"bytes"
	"fmt"
	"maps"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/manifesttest"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/nodelabels"
)

// chartDir is the Helm chart, relative to this package.
const chartDir = "../charts/warmd"

// helmLabels are the labels only the chart adds (Helm's bookkeeping); everything else must match.
var helmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// helm runs the helm binary `make test` builds (scripts/tools.sh) and returns its stdout.
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(testenv.Helm(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.Bytes(), nil
}

// render runs `helm template` in namespace warmd (the manifests' namespace) with --set values
// ("string:k=v" for --set-string).
func render(t *testing.T, sets ...string) []doc {
	t.Helper()
	args := []string{"template", "warmd", chartDir, "--namespace", "warmd"}
	for _, s := range sets {
		if v, ok := strings.CutPrefix(s, "string:"); ok {
			args = append(args, "--set-string", v)
		} else {
			args = append(args, "--set", s)
		}
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return manifesttest.Parse(t, "helm template", out)
}

func key(u *unstructured.Unstructured) string {
	return u.GetAPIVersion() + " " + u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// normalize drops what legitimately differs: the chart's Helm labels, and the NodeConfig text (its
// comments and key order), which is compared as parsed YAML instead.
func normalize(t *testing.T, u *unstructured.Unstructured) map[string]any {
	t.Helper()
	c := u.DeepCopy()
	if l := c.GetLabels(); l != nil {
		for _, k := range helmLabels {
			delete(l, k)
		}
		c.SetLabels(l)
	}
	if c.GetKind() == "ConfigMap" {
		data, _, _ := unstructured.NestedStringMap(c.Object, "data")
		parsed := map[string]any{}
		for k, v := range data {
			var anyV any
			if strings.HasSuffix(k, ".yaml") && yaml.Unmarshal([]byte(v), &anyV) == nil {
				parsed[k] = anyV
			} else {
				parsed[k] = v
			}
		}
		c.Object["data"] = parsed
	}
	return c.Object
}

// compareObjects fails on every object only one side has and every field that differs.
func compareObjects(t *testing.T, chart, manifests []doc) {
	t.Helper()
	want := map[string]*unstructured.Unstructured{}
	for _, d := range manifests {
		want[key(d.Obj)] = d.Obj
	}
	got := map[string]*unstructured.Unstructured{}
	for _, d := range chart {
		k := key(d.Obj)
		if _, dup := got[k]; dup {
			t.Errorf("the chart renders %s twice", k)
		}
		got[k] = d.Obj
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[k]
		if !ok {
			t.Errorf("manifests/ has %s, the chart does not render it", k)
			continue
		}
		a, b := normalize(t, want[k]), normalize(t, g)
		if !reflect.DeepEqual(a, b) {
			ay, _ := yaml.Marshal(a)
			by, _ := yaml.Marshal(b)
			t.Errorf("%s differs (- manifests/, + chart):\n%s", k, lineDiff(string(ay), string(by)))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart renders %s, manifests/ does not have it", k)
		}
	}
}

// lineDiff lists lines only one side has (both are key-sorted YAML, so this is readable).
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for _, l := range al {
		if !slices.Contains(bl, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range bl {
		if !slices.Contains(al, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

func without(docs []doc, kind string) []doc {
	return slices.DeleteFunc(slices.Clone(docs), func(d doc) bool { return d.Obj.GetKind() == kind })
}

// TestChartMatchesManifests keeps the two install routes one product: for each set of chart values,
// `helm template` renders exactly the objects the real `kustomize build` makes of the corresponding
// kustomizations (manifesttest.Build), field for field.
func TestChartMatchesManifests(t *testing.T) {
	base := manifesttest.Build(t, ".")
	noNS := without(base, "Namespace")
	cat := func(parts ...[]doc) []doc { return slices.Concat(parts...) }
	extender := cat(manifesttest.Build(t, "extender"), manifesttest.Build(t, "extender/second-scheduler"))
	kedaSets := []string{"extender.enabled=true", "keda.enabled=true", "keda.scaledObjects[0].name=vllm-qwen2-5-7b",
		"keda.scaledObjects[0].namespace=default", "keda.scaledObjects[0].deployment=vllm-qwen2-5-7b",
		"keda.scaledObjects[0].model=Qwen/Qwen2.5-7B-Instruct", "extender.scheduler.enabled=true"}
	tests := []struct {
		name      string
		sets      []string
		manifests []doc
	}{
		// Helm's convention: the release namespace exists (helm install --create-namespace).
		{"defaults", nil, noNS},
		{"namespace.create", []string{"namespace.create=true"}, base},
		{"monitoring", monitoringSets, cat(noNS, manifesttest.Build(t, "monitoring"))},
		{"extender and second scheduler", []string{"extender.enabled=true", "extender.scheduler.enabled=true"}, cat(noNS, extender)},
		{"extender monitoring", append(slices.Clone(monitoringSets), "extender.enabled=true", "extender.scheduler.enabled=true"),
			cat(noNS, manifesttest.Build(t, "monitoring"), extender, manifesttest.Build(t, "extender/monitoring"))},
		{"keda", kedaSets, cat(noNS, extender, manifesttest.Build(t, "extender/keda"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			compareObjects(t, render(t, tc.sets...), tc.manifests)
		})
	}
}

// TestKustomizeBuildIsTheListing: for every kustomization, the real `kustomize build` makes exactly
// the objects of the files it lists (manifesttest.Load, which the other manifest tests read, so what
// they check is what `kubectl apply -k` applies), and each file is listed once.
func TestKustomizeBuildIsTheListing(t *testing.T) {
	for _, dir := range []string{".", "monitoring", "examples", "extender", "extender/second-scheduler", "extender/monitoring", "extender/keda", "examples/monitoring"} {
		t.Run(dir, func(t *testing.T) {
			built, listed := manifesttest.Build(t, dir), manifesttest.Load(t, dir)
			if len(built) != len(listed) || len(built) == 0 {
				t.Errorf("kustomize build makes %d objects, the listing has %d", len(built), len(listed))
			}
			compareObjects(t, built, listed)
		})
	}
}

// TestHelmLint runs `helm lint --strict` on the defaults (TestHelmLintAllParts: every part on).
func TestHelmLint(t *testing.T) {
	for _, sets := range [][]string{nil, {"namespace.create=true"}} {
		args := []string{"lint", "--strict", chartDir}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "1 chart(s) linted, 0 chart(s) failed") {
			t.Errorf("helm %v:\n%s", args, out)
		}
		t.Logf("helm %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestChartValues: the values users set reach the objects, and the rendered objects decode strictly
// into their API types.
func TestChartValues(t *testing.T) {
	docs := render(t,
		"image.repository=127.0.0.1:5000/warmd/warmd", "image.digest=sha256:"+strings.Repeat("ab", 32),
		"string:nodeSelector.nvidia\\.com/gpu\\.present=true", "tolerations[0].key=example.com/gpu", "tolerations[0].operator=Exists",
		"runtimeClassName=nvidia", "resources.limits.memory=4Gi", "hostPaths.containerdSocket=/run/k3s/containerd/containerd.sock",
		"startupTaint=false", "priorityClass.create=false", "priorityClass.name=", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/warmd",
		"config.weights.budget=1Ti", "extender.enabled=true", "extender.leaderElect=false",
		"envFrom[0].secretRef.name=warmd-s3", "env[0].name=EXTRA", "string:env[0].value=1",
		"extraVolumes[0].name=gpu", "extraVolumes[0].configMap.name=inv", "extraVolumeMounts[0].name=gpu", "extraVolumeMounts[0].mountPath=/etc/inv",
		"extender.tolerations[0].key=warmd.io/cold", "extender.tolerations[0].operator=Exists")
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	for _, d := range docs {
		if _, _, err := codecs.UniversalDeserializer().Decode(d.Raw, nil, nil); err != nil {
			t.Errorf("%s %s: strict decode: %v", d.Obj.GetKind(), d.Obj.GetName(), err)
		}
	}
	ds := typed[appsv1.DaemonSet](t, docs, "DaemonSet", "warmd")
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != "127.0.0.1:5000/warmd/warmd@sha256:"+strings.Repeat("ab", 32) {
		t.Errorf("image = %s", c.Image)
	}
	if pod.NodeSelector["nvidia.com/gpu.present"] != "true" || pod.RuntimeClassName == nil || *pod.RuntimeClassName != "nvidia" || pod.PriorityClassName != "" {
		t.Errorf("pod spec: nodeSelector %v runtimeClass %v priorityClass %q", pod.NodeSelector, pod.RuntimeClassName, pod.PriorityClassName)
	}
	if len(pod.Tolerations) != 2 || pod.Tolerations[0].Key != nodelabels.TaintCold || pod.Tolerations[1].Key != "example.com/gpu" {
		t.Errorf("tolerations %+v: want warmd.io/cold always, then the values'", pod.Tolerations)
	}
	if c.Resources.Limits.Memory().String() != "4Gi" {
		t.Errorf("resources %+v", c.Resources)
	}
	for _, v := range pod.Volumes {
		if v.Name == "containerd" && v.HostPath.Path != "/run/k3s/containerd/containerd.sock" {
			t.Errorf("containerd hostPath %s", v.HostPath.Path)
		}
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef.Name != "warmd-s3" || c.Env[len(c.Env)-1].Name != "EXTRA" || c.Env[0].Name != "NODE_NAME" {
		t.Errorf("env %+v envFrom %+v", c.Env, c.EnvFrom)
	}
	if v := pod.Volumes[len(pod.Volumes)-1]; v.Name != "gpu" || v.ConfigMap == nil || c.VolumeMounts[len(c.VolumeMounts)-1].MountPath != "/etc/inv" {
		t.Errorf("extra volume %+v mounts %+v", v, c.VolumeMounts)
	}
	cm := typed[corev1.ConfigMap](t, docs, "ConfigMap", "warmd-config")
	cfg, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the chart's NodeConfig does not load: %v", err)
	}
	if cfg.Readiness.StartupTaint || cfg.Weights.Budget.String() != "1Ti" || len(cfg.Models) != 1 {
		t.Errorf("config from values: startupTaint %v budget %s models %d", cfg.Readiness.StartupTaint, cfg.Weights.Budget.String(), len(cfg.Models))
	}
	for _, d := range docs {
		if d.Obj.GetKind() == "PriorityClass" {
			t.Error("priorityClass.create=false still renders a PriorityClass")
		}
	}
	sa := typed[corev1.ServiceAccount](t, docs, "ServiceAccount", "warmd")
	if sa.Annotations["eks.amazonaws.com/role-arn"] == "" {
		t.Errorf("ServiceAccount annotations %v", sa.Annotations)
	}
	ext := typed[appsv1.Deployment](t, docs, "Deployment", "warmd-extender")
	if args := ext.Spec.Template.Spec.Containers[0].Args; slices.Contains(args, "--leader-elect") || !slices.Contains(args, "--filter-failed") {
		t.Errorf("extender args %v", args)
	}
	if tl := ext.Spec.Template.Spec.Tolerations; len(tl) != 1 || tl[0].Key != nodelabels.TaintCold {
		t.Errorf("extender tolerations %+v", tl)
	}

	// A digest that is not one fails with a fix.
	_, err = helm(t, "template", "warmd", chartDir, "--set", "image.digest=abc")
	if err == nil || !strings.Contains(err.Error(), "must start with sha256:") {
		t.Errorf("bad digest: %v", err)
	}
	// In another namespace the admission policy follows the ServiceAccount.
	out, err := helm(t, "template", "warmd", chartDir, "--namespace", "gpu-infra")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "'system:serviceaccount:gpu-infra:warmd'") {
		t.Error("the admission policy does not match the ServiceAccount of the release namespace")
	}
}
