package predict

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"warmd.io/warmd/pkg/nodelabels"
)

// DefaultAnnotationCap bounds the annotation in bytes so many models cannot grow the Node object.
const DefaultAnnotationCap = 2048

// Annotation renders predictions as the warmd.io/predicted-ready value: compact JSON mapping each
// model to whole seconds (rounded up: a scheduler should not be promised less than predicted), keys
// sorted so the value changes only when a prediction does. When the value would exceed maxBytes
// (0: DefaultAnnotationCap), the slowest models are left out first; they matter least to a scheduler
// looking for the fastest node, and a reader treats a missing model as "no prediction".
func Annotation(preds []Prediction, maxBytes int) (string, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultAnnotationCap
	}
	m := make(map[string]int64, len(preds))
	for _, p := range preds {
		if p.Model == "" || math.IsNaN(p.Seconds) || math.IsInf(p.Seconds, 0) || p.Seconds < 0 {
			return "", fmt.Errorf("prediction for model %q has invalid seconds %v: predict only named models with finite, non-negative times", p.Model, p.Seconds)
		}
		m[p.Model] = int64(math.Ceil(p.Seconds))
	}
	for {
		b, err := json.Marshal(m) // encoding/json sorts map keys
		if err != nil {
			return "", fmt.Errorf("encode %s: %w", nodelabels.AnnotationPredicted, err)
		}
		if len(b) <= maxBytes || len(m) == 0 {
			return string(b), nil
		}
		delete(m, slowest(m))
	}
}

func slowest(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	worst := keys[0]
	for _, k := range keys[1:] {
		if m[k] > m[worst] {
			worst = k
		}
	}
	return worst
}

// ParseAnnotation reads a warmd.io/predicted-ready value. An empty value is no predictions; a value
// that is not a JSON object of non-negative numbers is an error naming the problem.
func ParseAnnotation(v string) (map[string]float64, error) {
	if v == "" {
		return nil, nil
	}
	var m map[string]float64
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil, fmt.Errorf("annotation %s is not a JSON object of model → seconds (%w); it is written by warmd, check the node's warmd version", nodelabels.AnnotationPredicted, err)
	}
	for k, s := range m {
		if s < 0 || math.IsNaN(s) {
			return nil, fmt.Errorf("annotation %s: model %q has negative seconds %v", nodelabels.AnnotationPredicted, k, s)
		}
	}
	return m, nil
}

// Status is what a node reports about its predictions in /v1/status (the readiness section embeds
// it): every wanted model's prediction with its breakdown, the throughputs used, and how many
// recorded starts the history held.
type Status struct {
	Predictions   []Prediction `json:"predictions,omitempty"`
	Throughput    Throughput   `json:"throughput"`
	HistoryStarts int          `json:"historyStarts"`
}

// PredictAll predicts every situation (one per model this node wants), sorted by model, and returns
// them with the warmd.io/predicted-ready value for the Node.
func (p *Predictor) PredictAll(sits []Situation, tp Throughput) (Status, string, error) {
	st := Status{Throughput: tp, HistoryStarts: len(p.History)}
	for _, s := range sits {
		st.Predictions = append(st.Predictions, p.Predict(s, tp))
	}
	slices.SortFunc(st.Predictions, func(a, b Prediction) int { return strings.Compare(a.Model, b.Model) })
	ann, err := Annotation(st.Predictions, 0)
	return st, ann, err
}
