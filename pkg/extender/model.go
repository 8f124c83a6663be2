package extender

import (
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"warmd.io/warmd/pkg/model"
)

// AnnotationModel is the pod annotation naming the model a pod serves; it wins over detection.
const AnnotationModel = "warmd.io/model"

// PodModel returns the model a pod serves, "" when it names none. The warmd.io/model annotation
// wins; otherwise the first vLLM container (its image or command mentions vllm) is read for
// `--model X`, `--model=X` or `vllm serve X`, also inside a `sh -c` string. A --model that points at
// a Hugging Face cache snapshot (…/models--org--name/snapshots/<rev>, as warmd's example Deployment
// does) maps back to "org/name".
func PodModel(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	if m := strings.TrimSpace(pod.Annotations[AnnotationModel]); m != "" {
		return m
	}
	for _, c := range pod.Spec.Containers {
		var toks []string
		for _, s := range append(append([]string{}, c.Command...), c.Args...) {
			toks = append(toks, strings.Fields(s)...)
		}
		if !isVLLM(c.Image, toks) {
			continue
		}
		if m := modelArg(toks); m != "" {
			return canonical(m)
		}
	}
	return ""
}

func isVLLM(image string, toks []string) bool {
	if strings.Contains(strings.ToLower(image), "vllm") {
		return true
	}
	for _, t := range toks {
		if strings.Contains(t, "vllm") {
			return true
		}
	}
	return false
}

func modelArg(toks []string) string {
	for i, t := range toks {
		t = strings.Trim(t, `"'`)
		switch {
		case t == "--model" && i+1 < len(toks):
			return strings.Trim(toks[i+1], `"'`)
		case strings.HasPrefix(t, "--model="):
			return strings.Trim(strings.TrimPrefix(t, "--model="), `"'`)
		}
	}
	for i, t := range toks {
		// `vllm serve MODEL` (or args ["serve", MODEL] with the image's vllm entrypoint)
		if t == "serve" && i+1 < len(toks) && !strings.HasPrefix(toks[i+1], "-") {
			return strings.Trim(toks[i+1], `"'`)
		}
	}
	return ""
}

// canonical maps a local HF-cache snapshot path back to its model id; anything else is kept.
func canonical(m string) string {
	if !strings.HasPrefix(m, "/") {
		return m
	}
	for dir := path.Clean(m); dir != "/" && dir != "."; dir = path.Dir(dir) {
		base := path.Base(dir)
		if name, err := model.NameFromDir(base); err == nil {
			return name
		}
	}
	return m
}
