// Command genhistory writes testdata/history.jsonl: a synthetic but plausible history of vLLM starts
// on five nodes of two GPU SKUs for two models, for predict's unit tests and leave-one-out evaluation.
// Phase means follow the seed table's 7B split (defaults.go) scaled per model and SKU; every phase gets
// log-normal noise (σ≈0.12), one start in twenty has one phase doubled (a noisy neighbour), each node
// has its own disk and network speed, and an upgrade now and then brings a new image and a cache miss.
// It is deterministic (fixed seed): `go run ./pkg/predict/testdata/genhistory > pkg/predict/testdata/history.jsonl`.
package main

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"time"
)

type start struct {
	Model        string             `json:"model"`
	Node         string             `json:"node"`
	SKU          string             `json:"sku"`
	At           time.Time          `json:"at"`
	CompileCache string             `json:"compileCache"`
	Phases       map[string]float64 `json:"phases"`
	Total        float64            `json:"total"`
}

var (
	miss = map[string]float64{"imports": 13.8, "engine_start": 9.4, "weight_load": 28.6, "torch_compile": 61.8,
		"kv_cache_and_warmup": 35.6, "graph_capture": 40.6, "server_up": 3.6, "first_health_200": 2.7}
	hit = map[string]float64{"imports": 11.7, "engine_start": 8.1, "weight_load": 9.3, "torch_compile": 6.4,
		"kv_cache_and_warmup": 8.0, "graph_capture": 19.4, "server_up": 1.8, "first_health_200": 1.9}
	order = []string{"imports", "engine_start", "weights_download", "weight_load", "torch_compile",
		"kv_cache_and_warmup", "graph_capture", "server_up", "first_health_200"}
)

type node struct {
	name, sku string
	disk, net float64 // multipliers on weight_load and on transfer time
}

type model struct {
	name                        string
	weightsGB                   float64
	load, compile, kv, graphCap float64 // multipliers over the 7B means
}

func main() {
	r := rand.New(rand.NewPCG(42, 9))
	nodes := []node{
		{"gpu-h100-1", "nvidia-h100-80gb-hbm3", 1.0, 1.0}, {"gpu-h100-2", "nvidia-h100-80gb-hbm3", 0.9, 1.1},
		{"gpu-h100-3", "nvidia-h100-80gb-hbm3", 1.6, 1.4},
		{"gpu-a100-1", "nvidia-a100-sxm4-80gb", 1.1, 1.0}, {"gpu-a100-2", "nvidia-a100-sxm4-80gb", 1.2, 0.9},
	}
	models := []model{
		{"Qwen/Qwen2.5-7B-Instruct", 15.2, 1, 1, 1, 1},
		{"Qwen/Qwen2.5-32B-Instruct", 65.5, 4.3, 1.3, 1.5, 1.2},
	}
	skuSlow := map[string]float64{"nvidia-h100-80gb-hbm3": 1.0, "nvidia-a100-sxm4-80gb": 1.35}
	noise := func() float64 { return math.Exp(r.NormFloat64() * 0.12) }
	t0 := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	enc := json.NewEncoder(os.Stdout)
	for _, n := range nodes {
		for _, m := range models {
			at := t0.Add(time.Duration(r.IntN(3600)) * time.Second)
			starts := 7 + r.IntN(4)
			for i := range starts {
				first := i == 0
				upgrade := !first && r.Float64() < 0.12 // new vLLM image: pull again, compile cache misses
				cache := "hit"
				base := hit
				if first || upgrade || r.Float64() < 0.05 {
					cache, base = "miss", miss
				}
				ph := map[string]float64{}
				for _, p := range order {
					v, ok := base[p]
					if !ok {
						continue
					}
					switch p {
					case "weight_load":
						v *= m.load * n.disk
					case "torch_compile":
						v *= m.compile * skuSlow[n.sku]
					case "kv_cache_and_warmup":
						v *= m.kv * skuSlow[n.sku]
					case "graph_capture":
						v *= m.graphCap * skuSlow[n.sku]
					}
					ph[p] = round(v * noise())
				}
				if first {
					// weights were not prefetched yet: vLLM downloaded them (~220 MB/s on a 1.0 link)
					ph["weights_download"] = round(m.weightsGB * 1e9 / 220e6 * n.net * noise())
				}
				if first || upgrade {
					ph["image_pull"] = round(9.5e9 / 95e6 * n.net * noise()) // a ~9.5 GB vLLM image
				}
				if r.Float64() < 0.05 { // a noisy neighbour doubles one phase
					p := order[r.IntN(len(order))]
					if _, ok := ph[p]; ok {
						ph[p] = round(ph[p] * 2)
					}
				}
				total := 0.4 + 2*r.Float64() // time no phase covers (log gaps)
				for _, p := range order {
					total += ph[p]
				}
				_ = enc.Encode(start{Model: m.name, Node: n.name, SKU: n.sku, At: at, CompileCache: cache,
					Phases: ph, Total: round(total)})
				at = at.Add(time.Duration(6+r.IntN(48)) * time.Hour)
			}
		}
	}
}

func round(v float64) float64 { return math.Round(v*10) / 10 }
