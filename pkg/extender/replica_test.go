package extender

import (
	"math"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"warmd.io/warmd/pkg/vllm"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func readyPod(name, model string, readyAt time.Time, ready bool, started time.Time) *corev1.Pod {
	p := vllmPod(model)
	p.Name = name
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.NewTime(readyAt)}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "vllm", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}}
	return p
}

func TestReplicaReadySince(t *testing.T) {
	deleting := readyPod("d", m7b, t0, true, t0.Add(-time.Minute))
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	tests := []struct {
		name  string
		pod   *corev1.Pod
		since time.Time
		ok    bool
	}{
		{"ready: the condition's transition", readyPod("a", m7b, t0, true, t0.Add(-2*time.Minute)), t0, true},
		{"restarted after the transition: the restart", readyPod("b", m7b, t0, true, t0.Add(time.Minute)), t0.Add(time.Minute), true},
		{"not ready", readyPod("c", m7b, t0, false, t0.Add(-time.Minute)), time.Time{}, false},
		{"terminating", deleting, time.Time{}, false},
		{"no conditions yet", vllmPod(m7b), time.Time{}, false},
		{"nil", nil, time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			since, ok := ReplicaReadySince(tt.pod)
			if ok != tt.ok || !since.Equal(tt.since) {
				t.Errorf("ReplicaReadySince = %v, %v; want %v, %v", since, ok, tt.since, tt.ok)
			}
		})
	}
	if age, ok := ReplicaAge(readyPod("a", m7b, t0, true, t0), t0.Add(90*time.Second)); !ok || age != 90*time.Second {
		t.Errorf("ReplicaAge = %v, %v", age, ok)
	}
}

func TestWarmthScore(t *testing.T) {
	tests := []struct {
		age, tau time.Duration
		want     float64
	}{
		{0, 5 * time.Minute, 0},
		{5 * time.Minute, 5 * time.Minute, 1 - 1/math.E},
		{10 * time.Hour, 5 * time.Minute, 1},
		{time.Minute, 0, 1},
	}
	for _, tt := range tests {
		if got := WarmthScore(tt.age, tt.tau); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("WarmthScore(%v, %v) = %v, want %v", tt.age, tt.tau, got, tt.want)
		}
	}
}

func TestReplicasCounts(t *testing.T) {
	now := t0.Add(time.Hour)
	r := NewReplicas(10*time.Minute, func() time.Time { return now })
	r.Upsert(readyPod("old", m7b, t0, true, t0))                                        // ready 60 min
	r.Upsert(readyPod("new", m7b, now.Add(-2*time.Minute), true, t0))                   // ready 2 min: fresh
	r.Upsert(readyPod("starting", m7b, t0, false, t0))                                  // not ready
	r.Upsert(readyPod("other", "org/other", now.Add(-time.Minute), true, t0))           // another model, fresh
	r.Upsert(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "llm"}}) // no model: ignored
	ready, fresh := r.Counts()
	if ready[m7b] != 2 || fresh[m7b] != 1 || ready["org/other"] != 1 || fresh["org/other"] != 1 || len(ready) != 2 {
		t.Errorf("ready %v fresh %v", ready, fresh)
	}
	r.Delete("llm", "new")
	now = now.Add(time.Hour) // everything ages past the window
	ready, fresh = r.Counts()
	if ready[m7b] != 1 || fresh[m7b] != 0 || fresh["org/other"] != 0 {
		t.Errorf("after delete and an hour: ready %v fresh %v", ready, fresh)
	}
}

func TestSlimPodKeepsWhatReplicasRead(t *testing.T) {
	p := readyPod("a", m7b, t0, true, t0)
	p.Labels = map[string]string{"big": "label"}
	p.Spec.Volumes = []corev1.Volume{{Name: "v"}}
	o, _ := slimPod(p)
	s := o.(*corev1.Pod)
	if vllm.PodModel(s) != m7b || len(s.Spec.Volumes) != 0 || s.Labels != nil {
		t.Errorf("slim pod = %+v", s)
	}
	if since, ok := ReplicaReadySince(s); !ok || !since.Equal(t0) {
		t.Errorf("slim pod ready since %v %v", since, ok)
	}
	o, _ = slimPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: "nginx"}}}})
	if s := o.(*corev1.Pod); len(s.Spec.Containers) != 0 {
		t.Errorf("a non-vLLM pod kept its containers: %+v", s)
	}
}
