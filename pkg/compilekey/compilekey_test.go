package compilekey

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func base() Inputs {
	return Inputs{
		ImageDigest: "sha256:aaaa", Image: "vllm/vllm-openai:v0.11.0", VLLMVersion: "0.11.0", GPU: "NVIDIA-H100-80GB-HBM3",
		Model: "Qwen/Qwen3-8B", Revision: Default, DType: Default, Quantization: Default, MaxModelLen: "8192",
		CompilationConfig: Default, TP: 2, PP: 1, DP: 1, ExtraKnown: true,
		Env: map[string]string{"VLLM_ATTENTION_BACKEND": Fingerprint("FLASHINFER")}, EnvKnown: true,
	}
}

func TestCompare(t *testing.T) {
	with := func(f func(*Inputs)) Inputs {
		in := base()
		in.Env = map[string]string{"VLLM_ATTENTION_BACKEND": Fingerprint("FLASHINFER")}
		f(&in)
		return in
	}
	cases := []struct {
		name    string
		want    Inputs
		cached  []Inputs
		outcome Outcome
		differs []string
		unknown []string
	}{
		{name: "no cached start", want: base(), outcome: Unknown},
		{name: "same inputs", want: base(), cached: []Inputs{base()}, outcome: Hit},
		{name: "digest implies the version before the start", want: with(func(i *Inputs) { i.VLLMVersion = "" }),
			cached: []Inputs{base()}, outcome: Hit},
		{name: "tp differs", want: with(func(i *Inputs) { i.TP = 4 }), cached: []Inputs{base()}, outcome: Miss,
			differs: []string{InTP}},
		{name: "env value differs", want: with(func(i *Inputs) { i.Env["VLLM_ATTENTION_BACKEND"] = Fingerprint("FLASH_ATTN") }),
			cached: []Inputs{base()}, outcome: Miss, differs: []string{"env:VLLM_ATTENTION_BACKEND"}},
		{name: "env var only on one side", want: with(func(i *Inputs) { i.Env["TORCHINDUCTOR_MAX_AUTOTUNE"] = Fingerprint("1") }),
			cached: []Inputs{base()}, outcome: Miss, differs: []string{"env:TORCHINDUCTOR_MAX_AUTOTUNE"}},
		{name: "another keyed arg differs", want: with(func(i *Inputs) { i.Extra = map[string]string{"kv_cache_dtype": "fp8"} }),
			cached: []Inputs{base()}, outcome: Miss, differs: []string{"arg:kv_cache_dtype"}},
		{name: "args from a config file: unknown", want: with(func(i *Inputs) { i.ExtraKnown = false }),
			cached: []Inputs{base()}, outcome: Unknown, unknown: []string{InArgs}},
		{name: "image digest differs, version unknown", want: with(func(i *Inputs) { i.ImageDigest, i.VLLMVersion = "sha256:bbbb", "" }),
			cached: []Inputs{base()}, outcome: Miss, differs: []string{InImage}},
		{name: "image name differs without digests", want: with(func(i *Inputs) { i.ImageDigest, i.Image = "", "vllm/vllm-openai:v0.12.0" }),
			cached: []Inputs{base()}, outcome: Miss, differs: []string{InImage}},
		{name: "same tag, no digest: never a guessed hit", want: with(func(i *Inputs) { i.ImageDigest, i.VLLMVersion = "", "" }),
			cached: []Inputs{base()}, outcome: Unknown, unknown: []string{InImage, InVLLMVersion}},
		{name: "env from a secret: unknown", want: with(func(i *Inputs) { i.EnvKnown = false }),
			cached: []Inputs{base()}, outcome: Unknown, unknown: []string{InEnv}},
		{name: "missing gpu", want: with(func(i *Inputs) { i.GPU = "" }), cached: []Inputs{base()}, outcome: Unknown,
			unknown: []string{InGPU}},
		{name: "missing field but a known difference: miss", want: with(func(i *Inputs) { i.GPU, i.Model = "", "other" }),
			cached: []Inputs{base()}, outcome: Miss, differs: []string{InModel}},
		{name: "second cached start matches", want: base(),
			cached: []Inputs{with(func(i *Inputs) { i.DType = "float16" }), base()}, outcome: Hit},
		{name: "closest start names the differences", want: base(),
			cached:  []Inputs{with(func(i *Inputs) { i.DType, i.TP, i.Model = "float16", 1, "x" }), with(func(i *Inputs) { i.MaxModelLen = "4096" })},
			outcome: Miss, differs: []string{InMaxModelLen}},
		{name: "one cached start differs, another is unknown", want: base(),
			cached:  []Inputs{with(func(i *Inputs) { i.TP = 1 }), with(func(i *Inputs) { i.EnvKnown = false })},
			outcome: Unknown, unknown: []string{InEnv}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Compare(c.want, c.cached)
			if v.Outcome != c.outcome || !slices.Equal(v.Differs, c.differs) || !slices.Equal(v.Unknown, c.unknown) {
				t.Fatalf("Compare = %+v, want %s differs %v unknown %v", v, c.outcome, c.differs, c.unknown)
			}
			if v.Outcome == Hit && c.cached[v.Match].Model != c.want.Model {
				t.Fatalf("Match %d is not the matching start", v.Match)
			}
		})
	}
}

func TestReasonNamesNoValues(t *testing.T) {
	want := base()
	want.Env["VLLM_SECRETISH"] = Fingerprint("hunter2")
	v := Compare(want, []Inputs{base()})
	if v.Outcome != Miss || strings.Contains(v.Reason(), "hunter2") || !strings.Contains(v.Reason(), "env:VLLM_SECRETISH") {
		t.Fatalf("reason %q (verdict %+v)", v.Reason(), v)
	}
}

func TestFromArgs(t *testing.T) {
	cases := []struct {
		argv []string
		want Inputs
		ok   bool
	}{
		{argv: []string{"vllm", "serve", "Qwen/Qwen3-8B", "--tensor-parallel-size", "2", "--max-model-len=8192", "--dtype", "bfloat16"},
			want: Inputs{Model: "Qwen/Qwen3-8B", TP: 2, PP: 1, DP: 1, MaxModelLen: "8192", DType: "bfloat16", Revision: Default, Quantization: Default, CompilationConfig: Default},
			ok:   true},
		{argv: []string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/llama", "-tp", "4", "-O3", "-q", "fp8"},
			want: Inputs{Model: "/models/llama", TP: 4, PP: 1, DP: 1, CompilationConfig: "3", Quantization: "fp8", Revision: Default, DType: Default, MaxModelLen: Default},
			ok:   true},
		{argv: []string{"/bin/sh", "-c", "pip list && vllm serve m --compilation-config '{\"level\": 3}' --dtype auto"},
			want: Inputs{Model: "m", TP: 1, PP: 1, DP: 1, CompilationConfig: `{"level":3}`, Revision: Default, DType: Default, Quantization: Default, MaxModelLen: Default},
			ok:   true},
		{argv: []string{"vllm", "serve", "m", "--config", "/etc/vllm.yaml", "-tp", "2"}, want: Inputs{Model: "m", TP: 2}, ok: true},
		{argv: []string{"vllm", "serve", "m", "-O.level=3", "--compilation-config.cudagraph_mode", "FULL"},
			want: Inputs{Model: "m", TP: 1, PP: 1, DP: 1, CompilationConfig: ".level=3;.cudagraph_mode=FULL;", Revision: Default, DType: Default, Quantization: Default, MaxModelLen: Default}, ok: true},
		{argv: []string{"python", "server.py"}},
		{argv: []string{"vllm", "serve", "m", "-tp", "x"}, want: Inputs{Model: "m", TP: 1, PP: 1, DP: 1, Revision: Default, DType: Default, Quantization: Default, MaxModelLen: Default, CompilationConfig: Default}, ok: true},
	}
	for _, c := range cases {
		got, ok := FromArgs(c.argv)
		if ok != c.ok || !equalInputs(got, c.want) {
			t.Errorf("FromArgs(%q) = %+v, %v; want %+v, %v", c.argv, got, ok, c.want, c.ok)
		}
	}
}

func TestFromLogArgs(t *testing.T) {
	got, ok := FromLogArgs("non-default args: {'model_tag': 'Qwen/Qwen3-8B', 'model': 'Qwen/Qwen3-8B', 'max_model_len': 8192, 'tensor_parallel_size': 2, 'compilation_config': {'level': 3, 'cudagraph_capture_sizes': [1, 2]}}")
	want := Inputs{Model: "Qwen/Qwen3-8B", MaxModelLen: "8192", TP: 2, PP: 1, DP: 1, CompilationConfig: `{"level":3,"cudagraph_capture_sizes":[1,2]}`,
		Revision: Default, DType: Default, Quantization: Default}
	if !ok || !equalInputs(got, want) {
		t.Fatalf("dict: %+v %v", got, ok)
	}
	got, ok = FromLogArgs("args: Namespace(subparser='serve', model='m', revision=None, dtype='auto', quantization=None, max_model_len=None, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=2, compilation_config=None)")
	want = Inputs{Model: "m", TP: 1, PP: 1, DP: 2, Revision: Default, DType: Default, Quantization: Default, MaxModelLen: Default, CompilationConfig: Default}
	if !ok || !equalInputs(got, want) {
		t.Fatalf("namespace: %+v %v", got, ok)
	}
	if _, ok := FromLogArgs("non-default args: {'port': 8000}"); ok {
		t.Fatal("no model: want not ok")
	}
}

func TestExtraArgs(t *testing.T) {
	pod, _ := FromArgs([]string{"vllm", "serve", "m", "--kv-cache-dtype", "fp8", "--enable-lora", "--max-num-seqs=64", "--port", "8000"})
	logged, _ := FromLogArgs("non-default args: {'model': 'm', 'kv_cache_dtype': 'fp8', 'enable_lora': True, 'max_num_seqs': 64, 'port': 8000}")
	ns, _ := FromLogArgs("args: Namespace(model='m', kv_cache_dtype='fp8', enable_lora=True, max_num_seqs=64, trust_remote_code=False, port=8000)")
	want := map[string]string{"kv_cache_dtype": "fp8", "enable_lora": "True", "max_num_seqs": "64"}
	for name, in := range map[string]Inputs{"pod": pod, "non-default args": logged, "namespace": ns} {
		if !in.ExtraKnown || len(in.Extra) != len(want) {
			t.Errorf("%s: extra %v known %v, want %v", name, in.Extra, in.ExtraKnown, want)
		}
		for k, v := range want {
			if in.Extra[k] != v {
				t.Errorf("%s: %s = %q, want %q", name, k, in.Extra[k], v)
			}
		}
	}
}

func TestFromPod(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "sidecar", Image: "busybox"},
		{Name: "vllm", Image: "vllm/vllm-openai@sha256:abcd", Command: []string{"vllm", "serve"}, Args: []string{"m", "--tensor-parallel-size=2"},
			Env: []corev1.EnvVar{{Name: "VLLM_USE_V1", Value: "1"}, {Name: "HF_TOKEN", Value: "secret"}, {Name: "VLLM_PORT", Value: "8000"}}},
	}}}
	if VLLMContainer(pod) != "vllm" {
		t.Fatalf("VLLMContainer = %q", VLLMContainer(pod))
	}
	in, ok := FromPod(pod, "vllm")
	if !ok || in.ImageDigest != "sha256:abcd" || in.TP != 2 || !in.EnvKnown || len(in.Env) != 1 || in.Env["VLLM_USE_V1"] != Fingerprint("1") {
		t.Fatalf("FromPod = %+v, %v", in, ok)
	}
	pod.Spec.Containers[1].Env = append(pod.Spec.Containers[1].Env, corev1.EnvVar{Name: "VLLM_X", ValueFrom: &corev1.EnvVarSource{}})
	if in, _ := FromPod(pod, "vllm"); in.EnvKnown {
		t.Fatal("valueFrom: env must be unknown")
	}
	if _, ok := FromPod(pod, "sidecar"); ok {
		t.Fatal("sidecar is not vLLM")
	}
}

func equalInputs(a, b Inputs) bool {
	return a.Model == b.Model && a.Revision == b.Revision && a.DType == b.DType && a.Quantization == b.Quantization &&
		a.MaxModelLen == b.MaxModelLen && a.CompilationConfig == b.CompilationConfig && a.TP == b.TP && a.PP == b.PP && a.DP == b.DP
}

// TestFromPodImageEntrypoint: a pod that passes only args to a vLLM image (whose entrypoint is the
// server) has its inputs read, as the extender and pre-warm read its model.
func TestFromPodImageEntrypoint(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "sidecar", Image: "envoy", Args: []string{"--model", "no"}},
		{Name: "vllm", Image: "vllm/vllm-openai:v0.11.0", Args: []string{"--model", "org/m", "-tp", "2"}}}}}
	if c := VLLMContainer(pod); c != "vllm" {
		t.Fatalf("VLLMContainer = %q, want vllm", c)
	}
	in, ok := FromPod(pod, "vllm")
	if !ok || in.Model != "org/m" || in.TP != 2 || in.Image != "vllm/vllm-openai:v0.11.0" {
		t.Fatalf("FromPod = %+v, %v", in, ok)
	}
}
