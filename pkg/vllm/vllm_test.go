package vllm

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodModel(t *testing.T) {
	ctr := func(image string, cmd, args []string) corev1.Container {
		return corev1.Container{Name: "c", Image: image, Command: cmd, Args: args}
	}
	tests := []struct {
		name  string
		ann   map[string]string
		ctrs  []corev1.Container
		model string
	}{
		{"annotation wins", map[string]string{AnnotationModel: "org/a"}, []corev1.Container{ctr("vllm/vllm-openai", nil, []string{"--model", "org/b"})}, "org/a"},
		{"--model X", nil, []corev1.Container{ctr("vllm/vllm-openai:v0.11.0", nil, []string{"--model", "Qwen/Qwen2.5-7B-Instruct"})}, "Qwen/Qwen2.5-7B-Instruct"},
		{"--model=X", nil, []corev1.Container{ctr("registry.local/vllm:1", nil, []string{"--port=8000", "--model=org/m"})}, "org/m"},
		{"vllm serve X", nil, []corev1.Container{ctr("python:3.12", []string{"vllm", "serve", "org/m", "--port", "8000"}, nil)}, "org/m"},
		{"serve X as args to the image entrypoint", nil, []corev1.Container{ctr("vllm/vllm-openai", nil, []string{"serve", "org/m"})}, "org/m"},
		{"sh -c string", nil, []corev1.Container{ctr("vllm/vllm-openai", []string{"sh", "-c"}, []string{"exec vllm serve 'org/m' --port 8000"})}, "org/m"},
		{"python -m entrypoint", nil, []corev1.Container{ctr("ghcr.io/x/llm:1", []string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/m"}, nil)}, "org/m"},
		{"local HF snapshot maps back to the id", nil, []corev1.Container{ctr("vllm/vllm-openai", nil, []string{"--model", "/var/lib/warmd/weights/models--Qwen--Qwen2.5-7B-Instruct/snapshots/a09a3545"})}, "Qwen/Qwen2.5-7B-Instruct"},
		{"other local path kept", nil, []corev1.Container{ctr("vllm/vllm-openai", nil, []string{"--model", "/models/mine"})}, "/models/mine"},
		{"sidecar before vllm", nil, []corev1.Container{ctr("envoy", nil, []string{"--model", "no"}), ctr("vllm/vllm-openai", nil, []string{"--model", "org/m"})}, "org/m"},
		{"not vllm", nil, []corev1.Container{ctr("nginx", nil, []string{"--model", "org/m"})}, ""},
		{"vllm without model", nil, []corev1.Container{ctr("vllm/vllm-openai", nil, []string{"--port", "8000"})}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tt.ann}, Spec: corev1.PodSpec{Containers: tt.ctrs}}
			if got := PodModel(pod); got != tt.model {
				t.Errorf("PodModel = %q, want %q", got, tt.model)
			}
		})
	}
	if PodModel(nil) != "" {
		t.Error("nil pod has a model")
	}
}

// TestFind checks the one command-line reader on the shapes pod specs carry: where the invocation
// starts, where its shell command ends, and which words are its arguments.
func TestFind(t *testing.T) {
	tests := []struct {
		name  string
		argv  []string
		image string
		ok    bool
		model string
		args  []string
	}{
		{"vllm serve", []string{"vllm", "serve", "org/m", "--port", "8000"}, "python:3.12", true, "org/m", []string{"--port", "8000"}},
		{"full path to vllm", []string{"/opt/venv/bin/vllm", "serve", "org/m"}, "", true, "org/m", []string{}},
		{"api_server module", []string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model=org/m", "-tp", "2"}, "", true, "org/m", []string{"--model=org/m", "-tp", "2"}},
		{"sh -c ends at &&", []string{"sh", "-c", "pip list; vllm serve \"org/m\" --dtype auto && echo done"}, "", true, "org/m", []string{"--dtype", "auto"}},
		{"quoted json stays one word", []string{"sh", "-c", `vllm serve m -O '{"level": 3}'`}, "", true, "m", []string{"-O", `{"level": 3}`}},
		{"args to a vLLM image's entrypoint", []string{"--model", "org/m", "--port", "8000"}, "docker.io/vllm/vllm-openai:v0.11.0", true, "org/m", []string{"--model", "org/m", "--port", "8000"}},
		{"serve as args to a vLLM image", []string{"serve", "org/m"}, "vllm/vllm-openai", true, "org/m", []string{}},
		{"flags only, not a vLLM image", []string{"--model", "org/m"}, "nginx", false, "", nil},
		{"serve without vllm before it", []string{"python", "app.py", "serve", "org/m"}, "", false, "", nil},
		{"vLLM image without a model", []string{"--port", "8000"}, "vllm/vllm-openai", true, "", []string{"--port", "8000"}},
		{"positional wins over --model", []string{"vllm", "serve", "org/a", "--model", "org/b"}, "", true, "org/a", []string{"--model", "org/b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, ok := Find(tt.argv, tt.image)
			if ok != tt.ok || inv.Model != tt.model {
				t.Fatalf("Find = %+v, %v; want model %q, %v", inv, ok, tt.model, tt.ok)
			}
			if ok && strings.Join(inv.Args, "\x00") != strings.Join(tt.args, "\x00") {
				t.Errorf("Args = %q, want %q", inv.Args, tt.args)
			}
		})
	}
}
