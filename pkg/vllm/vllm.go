// Package vllm reads what a vLLM pod's spec says about the server it runs: which model it serves
// (PodModel) and the words of its vLLM command line (Find). It is the one reader of vLLM's command
// line in warmd, so the scheduler extender, the pre-warm, the compile-key check and the phases
// follower agree on which model a pod serves and on which arguments it passed: two readers would
// disagree on a `sh -c` script or an image whose entrypoint is vLLM, and a pod would be pre-warmed
// for one model and placed for another. It does no I/O.
package vllm

import (
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"warmd.io/warmd/pkg/model"
)

// AnnotationModel is the pod annotation naming the model a pod serves; it wins over the command line,
// for pods whose model cannot be read from it (a config file, a wrapper script).
const AnnotationModel = "warmd.io/model"

// Invocation is one vLLM server start found in a container's command line.
type Invocation struct {
	// Model is the served model as written: the positional argument of `vllm serve`, else the value
	// of --model; "" when the command line names none.
	Model string
	// Args are the words after the entry point (and after the positional model), up to the end of
	// that shell command (&&, ||, ; or |), quotes removed.
	Args []string
}

// Find returns the vLLM invocation in a container's command and args (joined, as the kubelet runs
// them): `vllm serve <model> …`, `python -m vllm.entrypoints.openai.api_server --model …`, either
// inside a shell string (`sh -c "… && vllm serve …"`), or, when image names vLLM (vllm/vllm-openai,
// whose entrypoint is the server), args alone (`--model X`, `serve X`). ok is false when no
// invocation is found.
func Find(argv []string, image string) (inv Invocation, ok bool) {
	var words []string
	for _, a := range argv {
		words = append(words, shellWords(a)...) // `sh -c "vllm serve …"` arrives as one word
	}
	start, serve := -1, false
	for i, w := range words {
		if w == "serve" && i > 0 && strings.HasSuffix(words[i-1], "vllm") {
			start, serve = i+1, true
			break
		}
		if strings.HasSuffix(w, "vllm.entrypoints.openai.api_server") || strings.HasSuffix(w, "vllm.entrypoints.api_server") {
			start = i + 1
			break
		}
	}
	if start < 0 {
		if !strings.Contains(strings.ToLower(image), "vllm") {
			return Invocation{}, false
		}
		start = 0 // args to the image's own entrypoint
		if len(words) > 0 && words[0] == "serve" {
			start, serve = 1, true
		}
	}
	end := len(words)
	for i := start; i < len(words); i++ {
		if w := words[i]; w == "&&" || w == "||" || w == ";" || w == "|" {
			end = i
			break
		}
	}
	args := words[start:end]
	if serve && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		inv.Model, args = args[0], args[1:]
	}
	inv.Args = args
	for i, w := range args {
		if inv.Model != "" {
			break
		}
		switch {
		case w == "--model" && i+1 < len(args):
			inv.Model = args[i+1]
		case strings.HasPrefix(w, "--model="):
			inv.Model = strings.TrimPrefix(w, "--model=")
		}
	}
	return inv, true
}

// PodModel returns the model a pod serves, "" when it names none. The warmd.io/model annotation
// wins; otherwise the first container with a vLLM invocation (Find) that names a model. A model
// that points at a Hugging Face cache snapshot (…/models--org--name/snapshots/<rev>, as warmd's
// example Deployment does) maps back to "org/name".
func PodModel(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	if m := strings.TrimSpace(pod.Annotations[AnnotationModel]); m != "" {
		return m
	}
	for _, c := range pod.Spec.Containers {
		if inv, ok := Find(append(append([]string{}, c.Command...), c.Args...), c.Image); ok && inv.Model != "" {
			return canonical(inv.Model)
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
		if name, err := model.NameFromDir(path.Base(dir)); err == nil {
			return name
		}
	}
	return m
}

// shellWords splits a shell command line into words, honouring single and double quotes (enough for
// the `sh -c "…"` scripts pod specs carry; no expansion).
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}
