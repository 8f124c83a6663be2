package manifests_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
)

func typed[T any](t *testing.T, docs []doc, kind, name string) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, docs, kind, name).Object, &out); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
	return &out
}

// TestConfigMapParses keeps the example NodeConfig loadable by the daemon.
func TestConfigMapParses(t *testing.T) {
	cm := typed[corev1.ConfigMap](t, all(t), "ConfigMap", "warmd-config")
	cfg, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("config.yaml in the ConfigMap does not load: %v", err)
	}
	if len(cfg.Models) == 0 || !cfg.Readiness.StartupTaint {
		t.Errorf("example config lost its model or startup taint: %+v", cfg)
	}
}

// TestWiring checks the names that tie the manifests to each other and to the code.
func TestWiring(t *testing.T) {
	docs := all(t)
	ds := typed[appsv1.DaemonSet](t, docs, "DaemonSet", "warmd")
	sa := find(t, docs, "ServiceAccount", "warmd")
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]

	if pod.ServiceAccountName != sa.GetName() || ds.Namespace != sa.GetNamespace() {
		t.Errorf("DaemonSet runs as %s/%s, ServiceAccount is %s/%s", ds.Namespace, pod.ServiceAccountName, sa.GetNamespace(), sa.GetName())
	}
	vap := find(t, docs, "ValidatingAdmissionPolicy", "warmd-own-node-own-keys")
	user := "system:serviceaccount:" + sa.GetNamespace() + ":" + sa.GetName()
	conds, _, _ := unstructuredSlice(vap.Object, "spec", "matchConditions")
	if len(conds) != 1 || !strings.Contains(conds[0].(map[string]any)["expression"].(string), "'"+user+"'") {
		t.Errorf("admission policy does not match user %s: %v", user, conds)
	}
	find(t, docs, "PriorityClass", pod.PriorityClassName)

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME is not from the downward API: %+v", e)
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Fatalf("container %s lacks an HTTP probe", c.Name)
		}
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" ||
		c.StartupProbe.FailureThreshold*c.StartupProbe.PeriodSeconds < 300 {
		t.Errorf("probes: startup %+v liveness %+v readiness %+v", c.StartupProbe, c.LivenessProbe, c.ReadinessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: %+v", c.Resources)
	}
	tolerates := func(key string) bool {
		for _, tl := range pod.Tolerations {
			if tl.Key == key {
				return true
			}
		}
		return false
	}
	if !tolerates(nodelabels.TaintCold) || !tolerates("nvidia.com/gpu") {
		t.Errorf("DaemonSet must tolerate %s and nvidia.com/gpu: %+v", nodelabels.TaintCold, pod.Tolerations)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	for path, host := range map[string]string{
		config.DefaultDataDir: config.DefaultDataDir, config.DefaultContainerdSocket: config.DefaultContainerdSocket,
		config.DefaultPodLogDir: config.DefaultPodLogDir,
	} {
		m, ok := mounts[path]
		if !ok || vols[m.Name].HostPath == nil || vols[m.Name].HostPath.Path != host {
			t.Errorf("%s is not the host's %s", path, host)
		}
	}
	if !mounts[config.DefaultPodLogDir].ReadOnly {
		t.Errorf("%s must be mounted read-only", config.DefaultPodLogDir)
	}
	cm := find(t, docs, "ConfigMap", "warmd-config")
	if m := mounts["/etc/warmd"]; m.Name == "" || vols[m.Name].ConfigMap == nil || vols[m.Name].ConfigMap.Name != cm.GetName() ||
		!strings.Contains(strings.Join(c.Args, " "), "/etc/warmd/config.yaml") {
		t.Errorf("config mount/args: %+v %v", m, c.Args)
	}
}

// TestExampleDeployment keeps the vLLM example pointed at what warmd publishes and keeps on disk.
func TestExampleDeployment(t *testing.T) {
	docs := all(t)
	cm := typed[corev1.ConfigMap](t, docs, "ConfigMap", "warmd-config")
	cfg, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Models[0]
	dep := typed[appsv1.Deployment](t, docs, "Deployment", "vllm-qwen2-5-7b")
	pod := dep.Spec.Template.Spec
	pref := pod.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(pref) == 0 || pref[0].Preference.MatchExpressions[0].Key != model.LabelKey(m.Name) ||
		pref[0].Preference.MatchExpressions[0].Values[0] != string(nodelabels.StateWarm) {
		t.Errorf("preferred affinity %+v, want %s=warm", pref, model.LabelKey(m.Name))
	}
	for _, tl := range pod.Tolerations {
		if tl.Key == nodelabels.TaintCold {
			t.Error("vLLM pods must not tolerate the startup taint")
		}
	}
	c := pod.Containers[0]
	snapshot := "/models/models--" + strings.ReplaceAll(m.Name, "/", "--") + "/snapshots/" + m.Revision
	if !strings.Contains(strings.Join(c.Args, " "), "--model "+snapshot) {
		t.Errorf("args %v do not point --model at %s", c.Args, snapshot)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	// The cache variables are exactly what `warmd cache env --model <name>` prints (cache.PodEnv), so the
	// example and the daemon's per-model trees (which eviction protects while a pod runs) agree.
	wantEnv := map[string]string{"HF_HUB_CACHE": "/models", "HF_HUB_OFFLINE": "1"}
	podEnv, err := cache.PodEnv(cache.PodMountPath, m.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range podEnv {
		wantEnv[e.Name] = e.Value
	}
	for k, v := range wantEnv {
		if env[k] != v {
			t.Errorf("env %s=%q, want %q", k, env[k], v)
		}
	}
	hosts := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hosts[v.Name] = v.HostPath.Path
		}
	}
	for _, vm := range c.VolumeMounts {
		want := map[string]string{"/models": cfg.DataDir + "/weights", cache.PodMountPath: cfg.DataDir + "/compile-cache/node"}[vm.MountPath]
		if want != "" && hosts[vm.Name] != want {
			t.Errorf("%s mounts %q, want host %s", vm.MountPath, hosts[vm.Name], want)
		}
	}
}

func unstructuredSlice(obj map[string]any, path ...string) ([]any, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	s, ok := cur.([]any)
	return s, ok, nil
}
