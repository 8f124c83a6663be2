package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/phases/follow"
)

// Against a real API server: a pod whose vllm container restarted once, with the kubelet's Pulled
// events for both runs (the second one "already present").
func TestLookup(t *testing.T) {
	env := kubeenv.Start(t)
	ctx := context.Background()
	cs := env.Client.CoreV1()
	ns := "phases-kube"
	if _, err := cs.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := cs.Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm-0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "vllm", Image: "vllm/vllm-openai:v0.10.2"}, {Name: "proxy", Image: "envoy:1"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)
	started0, started1 := t0.Add(60*time.Second), t0.Add(400*time.Second)
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "vllm", Image: "docker.io/vllm/vllm-openai:v0.10.2", RestartCount: 1,
		State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started1)}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: metav1.NewTime(started0), ExitCode: 1}},
	}}
	if _, err := cs.Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	event := func(name, container, msg string, at time.Time) {
		t.Helper()
		_, err := cs.Events(ns).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID, FieldPath: "spec.containers{" + container + "}"},
			Reason:         "Pulled", Message: msg, Type: "Normal",
			FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at),
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	event("pull-vllm", "vllm", `Successfully pulled image "vllm/vllm-openai:v0.10.2" in 52.5s (52.5s including waiting). Image size: 9876543210 bytes.`, started0.Add(-2*time.Second))
	event("pull-proxy", "proxy", `Successfully pulled image "envoy:1" in 3s`, started0.Add(-time.Second))
	event("present-vllm", "vllm", `Container image "vllm/vllm-openai:v0.10.2" already present on machine`, started1.Add(-time.Second))

	src := &Source{Client: env.Client}
	ref := follow.ContainerRef{Namespace: ns, Pod: pod.Name, PodUID: string(pod.UID), Container: "vllm"}
	tests := []struct {
		name                string
		restart             int
		started, pull, pEnd time.Time
	}{
		{"first run: pulled", 0, started0, started0.Add(-2*time.Second - 52500*time.Millisecond), started0.Add(-2 * time.Second)},
		// The restart found the image present: run 0's pull is not run 1's.
		{"restart: image already present", 1, started1, time.Time{}, time.Time{}},
		{"older run no longer in status", 5, time.Time{}, time.Time{}, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ref
			r.Restart = tc.restart
			info, err := src.Lookup(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if info.Image != "vllm/vllm-openai:v0.10.2" || !info.Started.Equal(tc.started) || !info.PullStart.Equal(tc.pull) || !info.PullEnd.Equal(tc.pEnd) {
				t.Errorf("got %+v\nwant started %v pull %v–%v", info, tc.started, tc.pull, tc.pEnd)
			}
		})
	}
	r := ref
	r.PodUID = "another-uid"
	if _, err := src.Lookup(ctx, r); err == nil || !strings.Contains(err.Error(), "nothing to add") {
		t.Errorf("a recreated pod must not lend its status to an old log: %v", err)
	}
}
