package compilekey

import (
	"strconv"
	"strings"

	"warmd.io/warmd/pkg/vllm"
)

// argKeys maps vLLM's argument names (dest form, as the log prints them) to the Inputs they set.
var argKeys = map[string]string{
	"model": InModel, "model_tag": InModel, "revision": InRevision, "dtype": InDType,
	"quantization": InQuantization, "max_model_len": InMaxModelLen, "compilation_config": InCompilationConfig,
	"tensor_parallel_size": InTP, "pipeline_parallel_size": InPP, "data_parallel_size": InDP,
}

// extraKeys are other args that enter the key through the cache, scheduler, speculative or LoRA
// config (dest names). They are compared by name: Inputs.Extra.
var extraKeys = map[string]bool{
	"kv_cache_dtype": true, "block_size": true, "max_num_seqs": true, "max_num_batched_tokens": true,
	"speculative_config": true, "enable_lora": true, "max_lora_rank": true, "hf_overrides": true, "trust_remote_code": true,
	"enforce_eager": true, "cuda_graph_sizes": true,
}

// boolFlags take no value on the command line.
var boolFlags = map[string]bool{"enable_lora": true, "trust_remote_code": true, "enforce_eager": true}

// flagDest maps CLI flags (long and short) to their dest names.
var flagDest = map[string]string{
	"--model": "model", "--revision": "revision", "--dtype": "dtype", "--quantization": "quantization", "-q": "quantization",
	"--max-model-len": "max_model_len", "--compilation-config": "compilation_config", "-O": "compilation_config",
	"--tensor-parallel-size": "tensor_parallel_size", "-tp": "tensor_parallel_size",
	"--pipeline-parallel-size": "pipeline_parallel_size", "-pp": "pipeline_parallel_size",
	"--data-parallel-size": "data_parallel_size", "-dp": "data_parallel_size",
}

// set fills the input named by dest from a value (quotes and torch. prefixes dropped; None is unset).
func (in *Inputs) set(dest, val string) {
	val = strings.Trim(strings.TrimSpace(val), `'"`)
	if val == "None" || val == "" {
		val = Default
	}
	if extraKeys[dest] {
		if in.Extra == nil {
			in.Extra = map[string]string{}
		}
		if val == "False" || val == "false" {
			val = Default // a store_true flag left unset, as a Namespace prints it
		}
		if val == "true" {
			val = "True"
		}
		in.Extra[dest] = strings.ReplaceAll(strings.Join(strings.Fields(val), ""), "'", `"`)
		return
	}
	name, ok := argKeys[dest]
	if !ok {
		return
	}
	switch name {
	case InModel:
		if val != Default {
			in.Model = val
		}
	case InRevision:
		in.Revision = val
	case InDType:
		in.DType = strings.TrimPrefix(val, "torch.")
	case InQuantization:
		in.Quantization = val
	case InMaxModelLen:
		in.MaxModelLen = val
	case InCompilationConfig:
		// The CLI takes JSON, the log prints a Python repr: one spelling for both.
		in.CompilationConfig = strings.ReplaceAll(strings.Join(strings.Fields(val), ""), "'", `"`)
	case InTP, InPP, InDP:
		n, err := strconv.Atoi(val)
		if err != nil || n <= 0 {
			n = 0 // unreadable: unknown, never a default
		}
		switch name {
		case InTP:
			in.TP = n
		case InPP:
			in.PP = n
		default:
			in.DP = n
		}
	}
}

// defaults marks what the args left unset: a complete args list (a command line, a Namespace, vLLM's
// non-default args) leaves every unset input at vLLM's default.
func (in *Inputs) defaults() {
	for _, p := range []*string{&in.Revision, &in.DType, &in.Quantization, &in.MaxModelLen, &in.CompilationConfig} {
		if *p == "" {
			*p = Default
		}
	}
	in.ExtraKnown = true
	for k, v := range in.Extra {
		if v == Default {
			delete(in.Extra, k)
		}
	}
	if in.DType == "auto" {
		in.DType = Default
	}
	for _, p := range []*int{&in.TP, &in.PP, &in.DP} {
		if *p == 0 {
			*p = 1
		}
	}
}

// FromArgs reads a vLLM command line (a container's command + args) as vllm.Find finds it: `vllm
// serve <model> …`, `python -m vllm.entrypoints.openai.api_server --model …`, or a shell script that
// runs either. It returns false when no vLLM invocation naming a model is found (the inputs stay
// unknown then).
func FromArgs(argv []string) (Inputs, bool) { return fromCommand(argv, "") }

// fromCommand is FromArgs for a container whose image is known: an image that names vLLM takes
// args alone (its entrypoint is the server).
func fromCommand(argv []string, image string) (Inputs, bool) {
	inv, ok := vllm.Find(argv, image)
	if !ok || inv.Model == "" {
		return Inputs{}, false
	}
	in := Inputs{Model: inv.Model}
	configFile := false
	words := inv.Args
	for i := 0; i < len(words); i++ {
		w := words[i]
		if w == "--config" || strings.HasPrefix(w, "--config=") {
			configFile = true // args from a YAML file: what the command line leaves unset is not known
		}
		if !strings.HasPrefix(w, "-") {
			continue
		}
		flag, val, hasVal := strings.Cut(w, "=")
		if strings.HasPrefix(w, "-O") && !strings.HasPrefix(w, "--") && len(w) > 2 && !hasVal {
			flag, val, hasVal = "-O", w[2:], true // -O3, -O{"level":3}
		}
		if strings.HasPrefix(flag, "-O.") || strings.HasPrefix(flag, "--compilation-config.") {
			// a dotted sub-key (-O.level=3): kept whole, so two spellings differ rather than match
			sub := strings.TrimPrefix(strings.TrimPrefix(w, "--compilation-config"), "-O")
			if !hasVal && i+1 < len(words) {
				i++
				sub += "=" + words[i]
			}
			in.CompilationConfig += sub + ";"
			continue
		}
		dest, ok := flagDest[flag]
		if !ok {
			dest = strings.ReplaceAll(strings.TrimPrefix(flag, "--"), "-", "_")
			if !extraKeys[dest] || !strings.HasPrefix(flag, "--") {
				continue
			}
			if boolFlags[dest] && !hasVal {
				in.set(dest, "True")
				continue
			}
		}
		if !hasVal && i+1 < len(words) {
			i++
			val = words[i]
		}
		if dest == "model" {
			continue // inv.Model already holds it (the positional one wins, as in vLLM)
		}
		in.set(dest, val)
	}
	if !configFile {
		in.defaults()
	}
	return in, true
}

// FromLogArgs reads vLLM's args line as phases.Result.Args keeps it: "non-default args: {'model':
// …}" (v0.9.0+) or "args: Namespace(model=…, …)" (≤ v0.8.5). It returns false when the line is absent
// or unreadable.
func FromLogArgs(line string) (Inputs, bool) {
	var body string
	switch {
	case strings.HasPrefix(line, "non-default args: {") && strings.HasSuffix(line, "}"):
		body = line[len("non-default args: {") : len(line)-1]
	case strings.HasPrefix(line, "args: Namespace(") && strings.HasSuffix(line, ")"):
		body = line[len("args: Namespace(") : len(line)-1]
	default:
		return Inputs{}, false
	}
	var in Inputs
	for _, kv := range splitTop(body) {
		k, v, ok := strings.Cut(kv, "=")
		if strings.HasPrefix(strings.TrimSpace(kv), "'") {
			k, v, ok = strings.Cut(kv, ":")
		}
		if !ok {
			continue
		}
		in.set(strings.Trim(strings.TrimSpace(k), `'`), v)
	}
	if in.Model == "" {
		return Inputs{}, false
	}
	in.defaults()
	return in, true
}

// splitTop splits a Python repr body at the commas that are not inside brackets or quotes.
func splitTop(s string) []string {
	var out []string
	depth, quote, from := 0, byte(0), 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '{' || c == '[' || c == '(':
			depth++
		case c == '}' || c == ']' || c == ')':
			depth--
		case c == ',' && depth == 0:
			out = append(out, s[from:i])
			from = i + 1
		}
	}
	return append(out, s[from:])
}

// FromLog builds a recorded start's inputs from what its log printed (the vLLM version, the args
// line, the compile-cache hash) and what the node knew (image reference and digest, GPU SKU). The env
// stays unknown: a log does not print it. ok is false without a readable args line.
func FromLog(version, argsLine, image, imageDigest, gpu, cacheHash string) (Inputs, bool) {
	in, ok := FromLogArgs(argsLine)
	if !ok {
		return Inputs{}, false
	}
	in.VLLMVersion, in.Image, in.ImageDigest, in.GPU, in.CacheHash = version, image, imageDigest, gpu, cacheHash
	if in.ImageDigest == "" {
		in.ImageDigest = digestOf(image)
	}
	return in, true
}
