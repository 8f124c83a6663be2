package predict

import "warmd.io/warmd/pkg/phases"

// DefaultTable holds what a prediction uses when neither history nor a measured throughput exists.
type DefaultTable struct {
	// Miss and Hit are seconds per in-process phase for a start that compiles (cache miss) and one
	// that loads compiled graphs (hit). Disabled uses Miss without torch_compile and graph_capture.
	Miss, Hit map[string]float64
	// WeightLoadBytes is the weights size Miss/Hit's weight_load was measured for; weight_load scales
	// with the situation's WeightsBytes when that is known.
	WeightLoadBytes int64
	// ImageBytesPerSecond and WeightsBytesPerSecond are the transfer rates assumed when this node has
	// measured none; ImageBytes and WeightsBytes the sizes assumed when the size is unknown too.
	ImageBytesPerSecond, WeightsBytesPerSecond float64
	ImageBytes, WeightsBytes                   int64
}

// Defaults returns the documented default table.
//
// Sources. The seed's startup table splits a 7B vLLM start on one GPU into phases and shows caches
// turning ~200 s into ~68 s (quoted in issues 6 and 9; the table itself is not in this
// repository). Miss and Hit are that table's per-phase split as pkg/phases measures
// it from the logs written to mimic it (pkg/phases/testdata/seed-7b-cold.log: 196.2 s, seed-7b-warm.log:
// 66.5 s). Their order of magnitude agrees with published figures: torch.compile
// "~43 s cold → ~5 s cache hit" (vllm #44881), "JIT adds 30–120 s" (GKM RFC). Transfer rates and sizes
// come from the same published figures: "15–20 GB image: 4–6 min per instance" (AWS DLAMI, ≈60 MB/s), "10 GB
// vLLM-class image", and "Llama3-70B service start 20 min → ~1 min" (≈140 GB in ~19 min, ≈120 MB/s);
// a 7B bf16 model's weights are ≈15.2 GB.
func Defaults() *DefaultTable {
	return &DefaultTable{
		Miss: map[string]float64{
			phases.PhaseImports: 13.8, phases.PhaseEngineStart: 9.4, phases.PhaseWeightLoad: 28.6,
			phases.PhaseTorchCompile: 61.8, phases.PhaseKVCacheAndWarmup: 35.6, phases.PhaseGraphCapture: 40.6,
			phases.PhaseServerUp: 3.6, phases.PhaseFirstHealth: 2.7,
		},
		Hit: map[string]float64{
			phases.PhaseImports: 11.7, phases.PhaseEngineStart: 8.1, phases.PhaseWeightLoad: 9.3,
			phases.PhaseTorchCompile: 6.4, phases.PhaseKVCacheAndWarmup: 8.0, phases.PhaseGraphCapture: 19.4,
			phases.PhaseServerUp: 1.8, phases.PhaseFirstHealth: 1.9,
		},
		WeightLoadBytes:       15_200_000_000,
		ImageBytesPerSecond:   60e6,
		WeightsBytesPerSecond: 120e6,
		ImageBytes:            10_000_000_000,
		WeightsBytes:          15_200_000_000,
	}
}

// phase returns the default seconds of an in-process phase for a cache outcome.
func (d *DefaultTable) phase(name string, cache phases.CompileCache, weightsBytes int64) float64 {
	table := d.Miss
	switch cache {
	case phases.CacheHit:
		table = d.Hit
	case phases.CacheDisabled:
		if name == phases.PhaseTorchCompile || name == phases.PhaseGraphCapture {
			return 0
		}
	}
	v := table[name]
	if name == phases.PhaseWeightLoad && weightsBytes > 0 && d.WeightLoadBytes > 0 {
		v *= float64(weightsBytes) / float64(d.WeightLoadBytes)
	}
	return v
}

// transfer returns the default seconds of an image pull or weights download of bytes (0: unknown).
func (d *DefaultTable) transfer(phase string, bytes int64) float64 {
	size, rate := d.ImageBytes, d.ImageBytesPerSecond
	if phase == phases.PhaseWeightsDownload {
		size, rate = d.WeightsBytes, d.WeightsBytesPerSecond
	}
	if bytes > 0 {
		size = bytes
	}
	if rate <= 0 {
		return 0
	}
	return float64(size) / rate
}
