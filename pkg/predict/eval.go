package predict

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"warmd.io/warmd/pkg/phases"
)

// Evaluation is a leave-one-out measurement of prediction error over a history.
type Evaluation struct {
	// N is how many starts were predicted (every start that became ready).
	N int
	// MedianAbsError and P90AbsError are in seconds; MedianAbsPct is |error| ÷ actual, in percent.
	MedianAbsError, P90AbsError, MedianAbsPct float64
	// DefaultsMedianAbsError is the same figure for a predictor without history (defaults only): the
	// baseline history has to beat.
	DefaultsMedianAbsError float64
}

// LeaveOneOut predicts every ready start in history from all the other starts (with the situation
// that start had: image and weights local or not, its compile-cache outcome) and compares the
// prediction with what the start took (image pull + total). Throughputs are not used: the history's
// own transfers are the evidence.
func LeaveOneOut(history []Start) Evaluation {
	var errs, pcts, base []float64
	for i, st := range history {
		if st.Total <= 0 {
			continue
		}
		rest := slices.Concat(history[:i:i], history[i+1:])
		s := Situation{
			Model: st.Model, Node: st.Node, SKU: st.SKU, Cache: st.CompileCache,
			ImageLocal: st.Phases[phases.PhaseImagePull] <= 0, WeightsLocal: st.Phases[phases.PhaseWeightsDownload] <= 0,
		}
		actual := st.Phases[phases.PhaseImagePull] + st.Total
		got := (&Predictor{History: rest}).Predict(s, Throughput{}).Seconds
		errs = append(errs, math.Abs(got-actual))
		pcts = append(pcts, 100*math.Abs(got-actual)/actual)
		b := (&Predictor{}).Predict(s, Throughput{}).Seconds
		base = append(base, math.Abs(b-actual))
	}
	return Evaluation{
		N: len(errs), MedianAbsError: median(errs), P90AbsError: quantile(errs, 0.9),
		MedianAbsPct: median(pcts), DefaultsMedianAbsError: median(base),
	}
}

// String is the one-line summary the evaluation prints.
func (e Evaluation) String() string {
	return fmt.Sprintf("leave-one-out over %d starts: median |error| %.1f s (%.1f%%), p90 %.1f s; defaults only: median |error| %.1f s",
		e.N, e.MedianAbsError, e.MedianAbsPct, e.P90AbsError, e.DefaultsMedianAbsError)
}

func quantile(vals []float64, q float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	v := slices.Clone(vals)
	slices.Sort(v)
	return v[int(math.Ceil(q*float64(len(v))))-1]
}

// ReadHistory reads starts as JSON lines (one Start per line; blank lines and lines starting with #
// are skipped), the format of testdata/history.jsonl.
func ReadHistory(r io.Reader) ([]Start, error) {
	var out []Start
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var st Start
		if err := json.Unmarshal([]byte(line), &st); err != nil {
			return nil, fmt.Errorf("history line %d: %w: each line must be one JSON start record", n, err)
		}
		out = append(out, st)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	return out, nil
}
