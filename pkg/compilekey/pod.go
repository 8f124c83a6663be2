package compilekey

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// FromPod reads the inputs of one container of a pod: the image (its digest when the reference pins
// one or the container status reports it), the vLLM command line and the keyed env. ok is false when
// the container does not run vLLM as far as its command line and image show (vllm.Find).
func FromPod(pod *corev1.Pod, container string) (in Inputs, ok bool) {
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == container {
			c = &pod.Spec.Containers[i]
		}
	}
	if c == nil {
		return Inputs{}, false
	}
	in, ok = fromCommand(append(append([]string{}, c.Command...), c.Args...), c.Image)
	if !ok {
		return Inputs{}, false
	}
	in.Image = c.Image
	in.ImageDigest = digestOf(c.Image)
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container && in.ImageDigest == "" {
			in.ImageDigest = digestOf(cs.ImageID)
		}
	}
	in.Env, in.EnvKnown = map[string]string{}, len(c.EnvFrom) == 0
	for _, e := range c.Env {
		if !KeyedEnv(e.Name) {
			continue
		}
		v := e.Value
		if e.ValueFrom != nil {
			in.EnvKnown = false // a value from a ConfigMap, Secret or field: not known from the spec
			v = "valueFrom"
		}
		in.Env[e.Name] = Fingerprint(v)
	}
	return in, true
}

// VLLMContainer returns the name of the pod's first container that runs vLLM, "" when none does.
func VLLMContainer(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if _, ok := fromCommand(append(append([]string{}, c.Command...), c.Args...), c.Image); ok {
			return c.Name
		}
	}
	return ""
}

// digestOf returns the "sha256:…" digest in an image reference or a status imageID
// ("docker-pullable://repo@sha256:…", "sha256:…"), "" when there is none.
func digestOf(ref string) string {
	if i := strings.LastIndex(ref, "@sha256:"); i >= 0 {
		return ref[i+1:]
	}
	if strings.HasPrefix(ref, "sha256:") {
		return ref
	}
	return ""
}
