package predict

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/phases"
)

const (
	h100 = "nvidia-h100-80gb-hbm3"
	m7b  = "Qwen/Qwen2.5-7B-Instruct"
)

var day0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// mk is a ready start whose phases are all `each` seconds, with total their sum plus 1 s of gaps.
func mk(node string, cache phases.CompileCache, day int, each float64, extra map[string]float64) Start {
	ph := map[string]float64{}
	total := 1.0
	for _, p := range []string{phases.PhaseImports, phases.PhaseEngineStart, phases.PhaseWeightLoad, phases.PhaseTorchCompile,
		phases.PhaseKVCacheAndWarmup, phases.PhaseGraphCapture, phases.PhaseServerUp, phases.PhaseFirstHealth} {
		ph[p] = each
		total += each
	}
	for k, v := range extra {
		ph[k] = v
		if k != phases.PhaseImagePull {
			total += v
		}
	}
	return Start{Model: m7b, Node: node, SKU: h100, At: day0.AddDate(0, 0, day), CompileCache: cache, Phases: ph, Total: total}
}

func phaseOf(t *testing.T, p Prediction, name string) Estimate {
	t.Helper()
	for _, e := range p.Phases {
		if e.Phase == name {
			return e
		}
	}
	t.Fatalf("prediction has no phase %s: %+v", name, p.Phases)
	return Estimate{}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestPredict(t *testing.T) {
	warmHere := Situation{Model: m7b, Node: "n1", SKU: h100, ImageLocal: true, WeightsLocal: true, Cache: phases.CacheHit}
	tests := []struct {
		name    string
		history []Start
		sit     Situation
		tp      Throughput
		check   func(t *testing.T, p Prediction)
	}{
		{
			name: "no history: seed-table defaults, local image and weights cost nothing",
			sit:  warmHere,
			check: func(t *testing.T, p Prediction) {
				want := 0.0
				for _, v := range Defaults().Hit {
					want += v
				}
				if !near(p.Seconds, want) {
					t.Errorf("seconds = %v, want the Hit column's sum %v", p.Seconds, want)
				}
				for _, e := range p.Phases {
					switch e.Phase {
					case phases.PhaseImagePull, phases.PhaseWeightsDownload:
						if e.Source != SourceLocal || e.Seconds != 0 {
							t.Errorf("%s = %+v, want local 0", e.Phase, e)
						}
					case Other:
						if e.Seconds != 0 || e.Source != SourceDefault {
							t.Errorf("other = %+v, want default 0", e)
						}
					default:
						if e.Source != SourceDefault {
							t.Errorf("%s source = %s, want default", e.Phase, e.Source)
						}
					}
				}
			},
		},
		{
			name: "unknown cache outcome predicts a compile (miss)",
			sit:  Situation{Model: m7b, Node: "n1", SKU: h100, ImageLocal: true, WeightsLocal: true},
			check: func(t *testing.T, p Prediction) {
				if p.Cache != phases.CacheMiss || phaseOf(t, p, phases.PhaseTorchCompile).Seconds != Defaults().Miss[phases.PhaseTorchCompile] {
					t.Errorf("cache %s, torch_compile %+v; want miss and the Miss default", p.Cache, phaseOf(t, p, phases.PhaseTorchCompile))
				}
			},
		},
		{
			name: "disabled cache: no compile, no graph capture",
			sit:  Situation{Model: m7b, Node: "n1", SKU: h100, ImageLocal: true, WeightsLocal: true, Cache: phases.CacheDisabled},
			check: func(t *testing.T, p Prediction) {
				if phaseOf(t, p, phases.PhaseTorchCompile).Seconds != 0 || phaseOf(t, p, phases.PhaseGraphCapture).Seconds != 0 {
					t.Errorf("compile/capture = %v/%v, want 0/0", phaseOf(t, p, phases.PhaseTorchCompile), phaseOf(t, p, phases.PhaseGraphCapture))
				}
			},
		},
		{
			name: "missing image and weights without history: size ÷ measured throughput",
			sit:  Situation{Model: m7b, Node: "n1", SKU: h100, ImageBytes: 10e9, WeightsBytes: 15e9, Cache: phases.CacheHit},
			tp:   Throughput{ImageBytesPerSecond: 100e6, WeightsBytesPerSecond: 500e6},
			check: func(t *testing.T, p Prediction) {
				img, w := phaseOf(t, p, phases.PhaseImagePull), phaseOf(t, p, phases.PhaseWeightsDownload)
				if img.Source != SourceThroughput || !near(img.Seconds, 100) {
					t.Errorf("image_pull = %+v, want throughput 100 s", img)
				}
				if w.Source != SourceThroughput || !near(w.Seconds, 30) {
					t.Errorf("weights_download = %+v, want throughput 30 s", w)
				}
			},
		},
		{
			name: "missing image, no throughput, no size: default size ÷ default rate",
			sit:  Situation{Model: m7b, Node: "n1", SKU: h100, WeightsLocal: true, Cache: phases.CacheHit},
			check: func(t *testing.T, p Prediction) {
				d := Defaults()
				if e := phaseOf(t, p, phases.PhaseImagePull); e.Source != SourceDefault || !near(e.Seconds, float64(d.ImageBytes)/d.ImageBytesPerSecond) {
					t.Errorf("image_pull = %+v, want default", e)
				}
			},
		},
		{
			name: "default weight_load scales with the weights' size",
			sit:  Situation{Model: m7b, Node: "n1", SKU: h100, ImageLocal: true, WeightsLocal: true, WeightsBytes: 2 * 15_200_000_000, Cache: phases.CacheHit},
			check: func(t *testing.T, p Prediction) {
				if e := phaseOf(t, p, phases.PhaseWeightLoad); !near(e.Seconds, 2*Defaults().Hit[phases.PhaseWeightLoad]) {
					t.Errorf("weight_load = %+v, want twice the default", e)
				}
			},
		},
		{
			name:    "this node's own history wins once it has enough starts",
			history: []Start{mk("n1", phases.CacheHit, 1, 5, nil), mk("n1", phases.CacheHit, 2, 7, nil), mk("n2", phases.CacheHit, 3, 50, nil), mk("n3", phases.CacheHit, 4, 50, nil)},
			sit:     warmHere,
			check: func(t *testing.T, p Prediction) {
				e := phaseOf(t, p, phases.PhaseTorchCompile)
				if e.Scope != ScopeNode || e.N != 2 || !near(e.Seconds, 6) || e.String() != "history n=2 (node)" {
					t.Errorf("torch_compile = %+v (%s), want node median 6 over 2", e, e)
				}
				// 8 phases of 6 s + 1 s of gaps
				if !near(p.Seconds, 49) {
					t.Errorf("seconds = %v, want 49", p.Seconds)
				}
			},
		},
		{
			name:    "one start on this node: the SKU's history is used",
			history: []Start{mk("n1", phases.CacheHit, 1, 5, nil), mk("n2", phases.CacheHit, 2, 7, nil), mk("n3", phases.CacheHit, 3, 9, nil)},
			sit:     warmHere,
			check: func(t *testing.T, p Prediction) {
				if e := phaseOf(t, p, phases.PhaseImports); e.Scope != ScopeSKU || e.N != 3 || !near(e.Seconds, 7) {
					t.Errorf("imports = %+v, want SKU median 7 over 3", e)
				}
			},
		},
		{
			name:    "another cache outcome's history is never used for compile, but is for imports",
			history: []Start{mk("n1", phases.CacheMiss, 1, 60, nil), mk("n1", phases.CacheMiss, 2, 60, nil)},
			sit:     warmHere,
			check: func(t *testing.T, p Prediction) {
				if e := phaseOf(t, p, phases.PhaseTorchCompile); e.Source != SourceDefault {
					t.Errorf("torch_compile = %+v, want the hit default, not miss history", e)
				}
				if e := phaseOf(t, p, phases.PhaseImports); e.Scope != ScopeSKUAnyCache || !near(e.Seconds, 60) {
					t.Errorf("imports = %+v, want sku-any-cache history", e)
				}
			},
		},
		{
			name:    "median resists one outlier",
			history: []Start{mk("n1", phases.CacheHit, 1, 5, nil), mk("n1", phases.CacheHit, 2, 6, nil), mk("n1", phases.CacheHit, 3, 500, nil)},
			sit:     warmHere,
			check: func(t *testing.T, p Prediction) {
				if e := phaseOf(t, p, phases.PhaseGraphCapture); !near(e.Seconds, 6) {
					t.Errorf("graph_capture = %+v, want 6", e)
				}
			},
		},
		{
			name: "only the most recent starts count",
			history: func() []Start {
				var h []Start
				for d := range 10 {
					h = append(h, mk("n1", phases.CacheHit, d, 100, nil)) // old
				}
				for d := range DefaultRecent {
					h = append(h, mk("n1", phases.CacheHit, 100+d, 4, nil)) // recent
				}
				return h
			}(),
			sit: warmHere,
			check: func(t *testing.T, p Prediction) {
				if e := phaseOf(t, p, phases.PhaseServerUp); e.N != DefaultRecent || !near(e.Seconds, 4) {
					t.Errorf("server_up = %+v, want the %d recent starts' 4 s", e, DefaultRecent)
				}
			},
		},
		{
			name: "pull history comes only from starts that pulled, and beats throughput",
			history: []Start{
				mk("n1", phases.CacheHit, 1, 5, map[string]float64{phases.PhaseImagePull: 80}), mk("n1", phases.CacheHit, 2, 5, nil),
				mk("n1", phases.CacheHit, 3, 5, map[string]float64{phases.PhaseImagePull: 120}),
			},
			sit: Situation{Model: m7b, Node: "n1", SKU: h100, WeightsLocal: true, ImageBytes: 1e9, Cache: phases.CacheHit},
			tp:  Throughput{ImageBytesPerSecond: 1e9},
			check: func(t *testing.T, p Prediction) {
				if e := phaseOf(t, p, phases.PhaseImagePull); e.Source != SourceHistory || e.N != 2 || !near(e.Seconds, 100) {
					t.Errorf("image_pull = %+v, want history median 100 over 2", e)
				}
			},
		},
		{
			name:    "other model's starts inform only model-independent phases",
			history: []Start{func() Start { s := mk("n1", phases.CacheHit, 1, 3, nil); s.Model = "other/model"; return s }()},
			sit:     warmHere,
			check: func(t *testing.T, p Prediction) {
				if e := phaseOf(t, p, phases.PhaseEngineStart); e.Scope != ScopeSKUAnyModel || !near(e.Seconds, 3) {
					t.Errorf("engine_start = %+v, want sku-any-model 3", e)
				}
				if e := phaseOf(t, p, phases.PhaseWeightLoad); e.Source != SourceDefault {
					t.Errorf("weight_load = %+v, want default", e)
				}
			},
		},
		{
			name:    "starts that never became ready are ignored",
			history: []Start{func() Start { s := mk("n1", phases.CacheHit, 1, 3, nil); s.Total = 0; return s }()},
			sit:     warmHere,
			check: func(t *testing.T, p Prediction) {
				if e := phaseOf(t, p, phases.PhaseImports); e.Source != SourceDefault {
					t.Errorf("imports = %+v, want default", e)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := (&Predictor{History: tt.history}).Predict(tt.sit, tt.tp)
			if len(p.Phases) != len(Order) {
				t.Fatalf("got %d phases, want %d", len(p.Phases), len(Order))
			}
			sum := 0.0
			for _, e := range p.Phases {
				sum += e.Seconds
			}
			if !near(sum, p.Seconds) {
				t.Errorf("phases add up to %v, Seconds is %v", sum, p.Seconds)
			}
			tt.check(t, p)
		})
	}
}

func TestMedianRate(t *testing.T) {
	tests := []struct {
		name string
		in   []Transfer
		want float64
	}{
		{"none", nil, 0},
		{"tiny transfers skipped", []Transfer{{Bytes: 100, Seconds: 1}, {Bytes: 1 << 30, Seconds: 0.001}}, 0},
		{"median of rates", []Transfer{{Bytes: 100e6, Seconds: 1}, {Bytes: 400e6, Seconds: 2}, {Bytes: 900e6, Seconds: 1}}, 200e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MedianRate(tt.in); !near(got, tt.want) {
				t.Errorf("MedianRate = %v, want %v", got, tt.want)
			}
		})
	}
}

func loadHistory(t *testing.T) []Start {
	t.Helper()
	f, err := os.Open("testdata/history.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestLeaveOneOut measures the predictor on the recorded histories and prints the figure
// (go test -run LeaveOneOut -v ./pkg/predict/). History must beat the defaults clearly.
func TestLeaveOneOut(t *testing.T) {
	h := loadHistory(t)
	ev := LeaveOneOut(h)
	t.Log(ev)
	if ev.N < 80 {
		t.Fatalf("evaluated %d starts, want every ready start of testdata (>= 80)", ev.N)
	}
	if ev.MedianAbsPct > 10 {
		t.Errorf("median |error| %.1f%% > 10%%", ev.MedianAbsPct)
	}
	if ev.MedianAbsError*2 > ev.DefaultsMedianAbsError {
		t.Errorf("history (%.1f s) does not halve the defaults' error (%.1f s)", ev.MedianAbsError, ev.DefaultsMedianAbsError)
	}
	docHas(t, ev.String())
}

func TestReadHistoryErrors(t *testing.T) {
	_, err := ReadHistory(strings.NewReader("# comment\n\n{\"model\": 3}\n"))
	if err == nil || !strings.Contains(err.Error(), "history line 3") {
		t.Fatalf("err = %v, want one naming line 3", err)
	}
}
