package manifests_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"warmd.io/warmd/pkg/config"
)

// With peers.enabled the chart gives warmd everything the peer feature needs: the peers section of the
// NodeConfig (which loads), a projected token for the audience where tokenFile points, RBAC to create
// tokenreviews, and the port as a hostPort (peers dial the Node's InternalIP). Off, none of it renders.
func TestChartPeers(t *testing.T) {
	docs := render(t, "peers.enabled=true", "peers.port=9555", "peers.uploadLimit=1Gi", "peers.serveSlots=3")
	cm := typed[corev1.ConfigMap](t, docs, "ConfigMap", "warmd-config")
	cfg, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the chart's NodeConfig does not load: %v", err)
	}
	p := cfg.Peers
	if !p.Enabled || p.Listen != ":9555" || p.ServiceAccount != "warmd/warmd" || p.UploadLimit.String() != "1Gi" || p.ServeSlots != 3 || p.Audience != "warmd.io/peer" {
		t.Errorf("peers config %+v", p)
	}
	pod := typed[appsv1.DaemonSet](t, docs, "DaemonSet", "warmd").Spec.Template.Spec
	var tokenOK bool
	for _, v := range pod.Volumes {
		if v.Projected != nil && len(v.Projected.Sources) == 1 && v.Projected.Sources[0].ServiceAccountToken != nil &&
			v.Projected.Sources[0].ServiceAccountToken.Audience == p.Audience {
			for _, m := range pod.Containers[0].VolumeMounts {
				if m.Name == v.Name && m.MountPath+"/"+v.Projected.Sources[0].ServiceAccountToken.Path == p.TokenFile {
					tokenOK = true
				}
			}
		}
	}
	if !tokenOK {
		t.Errorf("no projected token for %s at %s", p.Audience, p.TokenFile)
	}
	if !slices.ContainsFunc(pod.Containers[0].Ports, func(cp corev1.ContainerPort) bool { return cp.HostPort == 9555 && cp.ContainerPort == 9555 }) {
		t.Errorf("ports %+v: want hostPort 9555", pod.Containers[0].Ports)
	}
	role := typed[rbacv1.ClusterRole](t, docs, "ClusterRole", "warmd")
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "tokenreviews") && slices.Equal(r.Verbs, []string{"create"})
	}) {
		t.Errorf("ClusterRole rules %+v: want tokenreviews create", role.Rules)
	}
	off := render(t)
	if cfg, err := config.Parse([]byte(typed[corev1.ConfigMap](t, off, "ConfigMap", "warmd-config").Data["config.yaml"])); err != nil || cfg.Peers.Enabled {
		t.Errorf("default chart: peers enabled %v (%v)", cfg != nil && cfg.Peers.Enabled, err)
	}
	for _, r := range typed[rbacv1.ClusterRole](t, off, "ClusterRole", "warmd").Rules {
		if slices.Contains(r.Resources, "tokenreviews") {
			t.Error("default chart grants tokenreviews")
		}
	}
}
