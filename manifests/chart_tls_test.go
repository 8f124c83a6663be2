package manifests_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

// TestChartExtenderTLS renders the extender with extender.tls.enabled and checks that its halves
// agree: the extender serves HTTPS on 8888 from the Secret's files with the client CA and a plain
// 8889 for probes and metrics (which carry no client certificate); the Service, the ServiceMonitor
// and the probes use the right port; the second scheduler's config (strictly decoded as a
// KubeSchedulerConfiguration) calls https with the client certificate its Deployment mounts.
func TestChartExtenderTLS(t *testing.T) {
	docs := render(t, "extender.enabled=true", "extender.scheduler.enabled=true", "extender.tls.enabled=true",
		"serviceMonitor.enabled=true", "extender.tls.secretName=ext-tls", "extender.tls.schedulerSecretName=sched-client")
	ext := typed[appsv1.Deployment](t, docs, "Deployment", "warmd-extender")
	pod := ext.Spec.Template.Spec
	c := pod.Containers[0]
	mount := ""
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "ext-tls" {
				mount = m.MountPath
			}
		}
	}
	if mount == "" {
		t.Fatalf("the extender mounts no Secret ext-tls: %+v %+v", c.VolumeMounts, pod.Volumes)
	}
	for _, want := range []string{"--tls-cert-file=" + mount + "/tls.crt", "--tls-key-file=" + mount + "/tls.key",
		"--client-ca-file=" + mount + "/ca.crt", "--metrics-listen=:8889"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("extender args %v lack %s", c.Args, want)
		}
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["https"] != 8888 || ports["metrics"] != 8889 {
		t.Errorf("extender ports %v, want https 8888 and metrics 8889", ports)
	}
	if c.ReadinessProbe.HTTPGet.Port.String() != "metrics" || c.LivenessProbe.HTTPGet.Port.String() != "metrics" {
		t.Errorf("probes on %s/%s: they carry no client certificate, so they must use the plain port",
			c.ReadinessProbe.HTTPGet.Port.String(), c.LivenessProbe.HTTPGet.Port.String())
	}
	svc := typed[corev1.Service](t, docs, "Service", "warmd-extender")
	svcPorts := map[string]string{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = p.TargetPort.String()
	}
	if svcPorts["https"] != "https" || svcPorts["metrics"] != "metrics" {
		t.Errorf("Service ports %v", svcPorts)
	}
	sm := find(t, docs, "ServiceMonitor", "warmd-extender")
	if eps, _, _ := unstructuredSlice(sm.Object, "spec", "endpoints"); len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" {
		t.Errorf("ServiceMonitor endpoints %v, want port metrics", eps)
	}

	cm := typed[corev1.ConfigMap](t, docs, "ConfigMap", "warmd-scheduler-config")
	var sc schedv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), &sc); err != nil {
		t.Fatalf("the scheduler config does not decode strictly: %v", err)
	}
	if len(sc.Extenders) != 1 {
		t.Fatalf("%d extenders", len(sc.Extenders))
	}
	x := sc.Extenders[0]
	if !strings.HasPrefix(x.URLPrefix, "https://warmd-extender.warmd.svc:8888") || !x.EnableHTTPS || x.TLSConfig == nil {
		t.Fatalf("scheduler extender %s enableHTTPS %v tlsConfig %+v", x.URLPrefix, x.EnableHTTPS, x.TLSConfig)
	}
	sched := typed[appsv1.Deployment](t, docs, "Deployment", "warmd-scheduler")
	spod := sched.Spec.Template.Spec
	clientMount := ""
	for _, m := range spod.Containers[0].VolumeMounts {
		for _, v := range spod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "sched-client" {
				clientMount = m.MountPath
			}
		}
	}
	if clientMount == "" {
		t.Fatalf("the scheduler mounts no Secret sched-client")
	}
	for name, f := range map[string]string{"caFile": x.TLSConfig.CAFile, "certFile": x.TLSConfig.CertFile, "keyFile": x.TLSConfig.KeyFile} {
		if !strings.HasPrefix(f, clientMount+"/") {
			t.Errorf("tlsConfig.%s = %s, not in the mounted Secret %s", name, f, clientMount)
		}
	}

	// Off (the default): plain HTTP on one port, as before.
	plain := typed[appsv1.Deployment](t, render(t, "extender.enabled=true"), "Deployment", "warmd-extender")
	for _, a := range plain.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--tls") || strings.HasPrefix(a, "--client-ca") {
			t.Errorf("TLS off renders %s", a)
		}
	}
}
