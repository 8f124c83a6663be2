// Package kube reads what the API server knows about one vLLM container start and the log does not
// say: the container's image, when the runtime started it (pod status) and how long the kubelet pulled
// its image (the Pulled event). It backs follow.ContainerInfoFunc.
//
// It only reads (pods get, events list) and never guesses: a start it cannot tie to the pod's current
// status or to a Pulled event gets no container start or no image_pull.
package kube

import (
	"context"
	"fmt"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/phases/follow"
)

var _ follow.ContainerInfoFunc = (&Source{}).Lookup

// rePulled reads the kubelet's Pulled event: `Successfully pulled image "%s" in %v` and, in newer
// kubelets, ` (%v including waiting). Image size: %v bytes.` The first duration is the pull itself.
var rePulled = regexp.MustCompile(`^Successfully pulled image "([^"]*)" in ([0-9][0-9a-zµ.]*)`)

// clockSlack tolerates the seconds-only timestamps of events and container statuses.
const clockSlack = 2 * time.Second

// maxPullToStart bounds the gap between a pull's end and the container start it belongs to: the
// kubelet pulls right before it creates the container.
const maxPullToStart = time.Minute

// Source looks starts up through the API server.
type Source struct {
	Client kube.Interface
}

// Lookup returns what the API server knows about ref.
func (s *Source) Lookup(ctx context.Context, ref follow.ContainerRef) (follow.ContainerInfo, error) {
	var info follow.ContainerInfo
	pod, err := s.Client.CoreV1().Pods(ref.Namespace).Get(ctx, ref.Pod, metav1.GetOptions{})
	if err != nil {
		return info, fmt.Errorf("get pod %s/%s: %w", ref.Namespace, ref.Pod, err)
	}
	if string(pod.UID) != ref.PodUID {
		return info, fmt.Errorf("pod %s/%s is uid %s now, the log is from %s: nothing to add", ref.Namespace, ref.Pod, pod.UID, ref.PodUID)
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name == ref.Container {
			info.Image = c.Image
		}
	}
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if cs.Name != ref.Container {
			continue
		}
		info.Started = startedAt(cs, ref.Restart)
	}
	if info.Started.IsZero() {
		return info, nil // a pull cannot be tied to this start without its start time
	}
	evs, err := s.Client.CoreV1().Events(ref.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.uid", ref.PodUID),
			fields.OneTermEqualSelector("reason", "Pulled"),
		).String(),
	})
	if err != nil {
		return info, fmt.Errorf("list Pulled events of pod %s/%s: %w", ref.Namespace, ref.Pod, err)
	}
	// The latest Pulled event before the start is this run's: either a pull with its duration, or
	// "already present on machine" (no pull). An older pull belongs to an older run.
	var latest *corev1.Event
	for i, ev := range evs.Items {
		if ev.InvolvedObject.FieldPath != "spec.containers{"+ref.Container+"}" &&
			ev.InvolvedObject.FieldPath != "spec.initContainers{"+ref.Container+"}" {
			continue
		}
		end := eventTime(ev)
		if end.IsZero() || end.After(info.Started.Add(clockSlack)) || info.Started.Sub(end) > maxPullToStart {
			continue
		}
		if latest == nil || end.After(eventTime(*latest)) {
			latest = &evs.Items[i]
		}
	}
	if latest == nil {
		return info, nil
	}
	m := rePulled.FindStringSubmatch(latest.Message)
	if m == nil {
		return info, nil // "already present on machine": no pull for this run
	}
	d, err := time.ParseDuration(m[2])
	if err != nil || d < 0 {
		return info, nil
	}
	end := eventTime(*latest)
	if end.After(info.Started) {
		// Event and status clocks are whole seconds (or µs against seconds): the pull ended before
		// the container started, so its end is pinned there, keeping the duration the kubelet measured.
		end = info.Started
	}
	info.PullStart, info.PullEnd = end.Add(-d), end
	return info, nil
}

// startedAt is the runtime's start of the container's restart-th run, when the status still holds it.
func startedAt(cs corev1.ContainerStatus, restart int) time.Time {
	switch int(cs.RestartCount) {
	case restart:
		if cs.State.Running != nil {
			return cs.State.Running.StartedAt.Time
		}
		if cs.State.Terminated != nil {
			return cs.State.Terminated.StartedAt.Time
		}
	case restart + 1:
		if cs.LastTerminationState.Terminated != nil {
			return cs.LastTerminationState.Terminated.StartedAt.Time
		}
	}
	return time.Time{}
}

func eventTime(ev corev1.Event) time.Time {
	switch {
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	}
	return ev.FirstTimestamp.Time
}
