package prewarm

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNotStarting: only a pod bound here, alive and not ready is pre-warmed for.
func TestNotStarting(t *testing.T) {
	p := &Part{node: "n"}
	now := metav1.Now()
	for _, tc := range []struct {
		name     string
		pod      corev1.Pod
		starting bool
	}{
		{"bound, no status yet", corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}}, true},
		{"running, not ready", corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}}, true},
		{"ready", corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}, false},
		{"other node", corev1.Pod{Spec: corev1.PodSpec{NodeName: "m"}}, false},
		{"being deleted", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Spec: corev1.PodSpec{NodeName: "n"}}, false},
		{"failed", corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodFailed}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if why := p.notStarting(&tc.pod); (why == "") != tc.starting {
				t.Fatalf("notStarting = %q, want starting=%v", why, tc.starting)
			}
		})
	}
}
