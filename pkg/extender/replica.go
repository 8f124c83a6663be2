package extender

import (
	"math"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"warmd.io/warmd/pkg/vllm"
)

// The router signal: how long a vLLM replica has been ready. A fresh replica has an empty prefix
// cache, so a prefix-aware router (an llm-d / Gateway API Inference Extension endpoint picker) should
// not expect cache hits there yet, and an autoscaler should not count it as full capacity.
//
// The signal is read from the Pod, not written by warmd: the kubelet sets the Ready condition's
// lastTransitionTime when the vLLM container's readiness probe (/health) first passes, and resets it
// whenever the container restarts (a restart empties the prefix cache too). A router already
// watches the Pods it routes to, so the signal costs no API write and no per-pod metric label.
// docs/signals.md says why no warmd-written annotation or metric was chosen.

// ReplicaReadySince returns when the pod's current containers became ready: the Ready condition's
// lastTransitionTime, but never earlier than the last (re)start of any container (a restart that
// the condition did not record, e.g. between two probe periods, still empties the cache). ok is
// false while the pod is not Ready.
func ReplicaReadySince(pod *corev1.Pod) (since time.Time, ok bool) {
	if pod == nil || pod.DeletionTimestamp != nil {
		return time.Time{}, false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status != corev1.ConditionTrue {
				return time.Time{}, false
			}
			since = c.LastTransitionTime.Time
			ok = true
		}
	}
	if !ok {
		return time.Time{}, false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running != nil && cs.State.Running.StartedAt.After(since) {
			since = cs.State.Running.StartedAt.Time
		}
	}
	return since, true
}

// ReplicaAge is how long the pod has been ready at now; ok is false while it is not Ready.
func ReplicaAge(pod *corev1.Pod, now time.Time) (time.Duration, bool) {
	since, ok := ReplicaReadySince(pod)
	if !ok {
		return 0, false
	}
	return max(now.Sub(since), 0), true
}

// WarmthScore turns a replica's age into a 0–1 factor for a router's scorer: 0 for a replica that
// just became ready, 1-1/e after tau, approaching 1 for old replicas. tau is how long the replica
// takes to fill its prefix cache under the router's traffic (minutes for chat traffic).
func WarmthScore(age, tau time.Duration) float64 {
	if tau <= 0 {
		return 1
	}
	return 1 - math.Exp(-float64(age)/float64(tau))
}

// Replicas tracks the vLLM pods of each model (PodModel) and when they became ready, for the
// autoscaler metrics warmd_vllm_ready_replicas and warmd_vllm_fresh_replicas (bounded: per model).
type Replicas struct {
	mu   sync.RWMutex
	pods map[string]replica // namespace/name → replica
	// Fresh is the age under which a ready replica counts as fresh.
	Fresh time.Duration
	now   func() time.Time
}

type replica struct {
	model string
	since time.Time
	ready bool
}

// DefaultFresh is how long a replica counts as fresh by default.
const DefaultFresh = 10 * time.Minute

// NewReplicas returns an empty tracker; now may be nil (time.Now).
func NewReplicas(fresh time.Duration, now func() time.Time) *Replicas {
	if fresh <= 0 {
		fresh = DefaultFresh
	}
	if now == nil {
		now = time.Now
	}
	return &Replicas{pods: map[string]replica{}, Fresh: fresh, now: now}
}

// Upsert records a pod; pods that serve no model are forgotten.
func (r *Replicas) Upsert(pod *corev1.Pod) {
	key := pod.Namespace + "/" + pod.Name
	model := vllm.PodModel(pod)
	r.mu.Lock()
	defer r.mu.Unlock()
	if model == "" {
		delete(r.pods, key)
		return
	}
	since, ok := ReplicaReadySince(pod)
	r.pods[key] = replica{model: model, since: since, ready: ok}
}

// Delete forgets a pod.
func (r *Replicas) Delete(namespace, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pods, namespace+"/"+name)
}

// Counts returns, per model, the ready replicas and those of them ready for less than Fresh.
func (r *Replicas) Counts() (ready, fresh map[string]int) {
	now := r.now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	ready, fresh = map[string]int{}, map[string]int{}
	for _, p := range r.pods {
		if _, seen := ready[p.model]; !seen {
			ready[p.model], fresh[p.model] = 0, 0
		}
		if !p.ready {
			continue
		}
		ready[p.model]++
		if now.Sub(p.since) < r.Fresh {
			fresh[p.model]++
		}
	}
	return ready, fresh
}

// slimPod keeps what Replicas reads, so a cluster-wide pod informer stays small: identity, the model
// annotation, containers' image/command/args (only for pods that look like vLLM), Ready condition
// and container start times.
func slimPod(o any) (any, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return o, nil
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		DeletionTimestamp: p.DeletionTimestamp,
	}}
	if m, ok := p.Annotations[vllm.AnnotationModel]; ok {
		out.Annotations = map[string]string{vllm.AnnotationModel: m}
	}
	if vllm.PodModel(p) == "" {
		return out, nil
	}
	for _, c := range p.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args})
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{Name: cs.Name, State: cs.State})
	}
	return out, nil
}
