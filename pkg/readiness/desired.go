package readiness

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"

	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
)

// Default caps on what warmd writes, so a fleet with many models cannot grow Node objects without bound.
const (
	DefaultStatusCap  = 4096
	conditionMsgLimit = 1024
	// maxNameOnNode and maxNoteOnNode cap a model name and one reason or missing item in the status
	// annotation.
	maxNameOnNode = 256
	maxNoteOnNode = 256
)

// nodeSafe is the state as the status annotation carries it: every text cleaned and capped. Reason
// and Missing are already built from warmd's own vocabulary and configured names (Evaluate); this is
// the backstop at the boundary.
func nodeSafe(m ModelState) ModelState {
	m.Reason = cleanText(m.Reason, maxNoteOnNode)
	if m.Missing != nil {
		miss := make([]string, len(m.Missing))
		for i, s := range m.Missing {
			miss[i] = cleanText(s, maxNoteOnNode)
		}
		m.Missing = miss
	}
	m.Digest, m.Revision = cleanText(m.Digest, maxNoteOnNode), cleanText(m.Revision, maxNoteOnNode)
	return m
}

// Desired is everything warmd wants on its Node, computed from the warm states alone.
type Desired struct {
	// Labels are the warmd-owned labels (identity, warm, one per wanted model).
	Labels nodelabels.Labels
	// Annotations are the warmd-owned annotations (warmd.io/status).
	Annotations nodelabels.Labels
	// Warm is true when every wanted model is warm.
	Warm bool
	// EverWarm is sticky: true once the node has been warm; the startup taint is never put back after.
	EverWarm  bool
	Condition Condition
	// Models are the evaluated states, for the status section and metrics.
	Models []ModelState
}

// Condition is the WarmdReady condition's content (times are the writer's business).
type Condition struct {
	Status  corev1.ConditionStatus
	Reason  string
	Message string
}

// StatusSummary is the JSON in the warmd.io/status annotation: small, stable (no timestamps, so it
// changes only when the state does) and capped in size.
type StatusSummary struct {
	Version  int                   `json:"v"`
	Warm     bool                  `json:"warm"`
	EverWarm bool                  `json:"everWarm,omitempty"`
	SKU      string                `json:"sku,omitempty"`
	Models   map[string]ModelState `json:"models,omitempty"`
	// Omitted counts models left out to stay under the size cap.
	Omitted int `json:"omitted,omitempty"`
	// Trimmed is true when per-model details were dropped to stay under the size cap.
	Trimmed bool `json:"trimmed,omitempty"`
}

// Build computes the desired Node content. everWarm is what the Node's own status annotation says
// (ParseStatus), so a warmd restart does not forget that the node was warm once. statusCap bounds the
// status annotation in bytes (0 means DefaultStatusCap).
func Build(in Input, everWarm bool, statusCap int) Desired {
	if statusCap <= 0 {
		statusCap = DefaultStatusCap
	}
	states := Evaluate(in)
	warm := AllWarm(states)
	d := Desired{
		Labels: nodelabels.Labels{}, Annotations: nodelabels.Labels{}, Warm: warm, EverWarm: everWarm || warm, Models: states,
	}
	for k, v := range in.IdentityLabels {
		if strings.HasPrefix(k, nodelabels.Prefix) && len(content.IsLabelKey(k)) == 0 {
			d.Labels[k] = nodelabels.Value(v)
		}
	}
	if in.SKU != "" {
		d.Labels[nodelabels.LabelSKU] = nodelabels.Value(in.SKU)
	}
	d.Labels[nodelabels.LabelWarm] = fmt.Sprint(warm)
	names := make([]string, 0, len(in.Models))
	for _, m := range in.Models {
		names = append(names, m.Name)
	}
	keys := model.LabelKeys(names)
	for _, s := range states {
		d.Labels[keys[s.Name]] = string(s.State)
	}
	if in.Predictions.Annotation != "" {
		d.Annotations[nodelabels.AnnotationPredicted] = in.Predictions.Annotation
	}
	d.Annotations[nodelabels.AnnotationStatus] = statusJSON(StatusSummary{
		Version: 1, Warm: warm, EverWarm: d.EverWarm, SKU: in.SKU,
	}, states, statusCap)
	d.Condition = condition(states)
	return d
}

// ParseStatus reads the status annotation back; a missing or unreadable one reads as zero.
func ParseStatus(annotations map[string]string) StatusSummary {
	var s StatusSummary
	if v, ok := annotations[nodelabels.AnnotationStatus]; ok {
		_ = json.Unmarshal([]byte(v), &s) // an unreadable annotation is rewritten by the next apply
	}
	return s
}

// statusJSON fills in the models, dropping detail level by level until the JSON fits in limit bytes.
func statusJSON(base StatusSummary, states []ModelState, limit int) string {
	levels := []func(ModelState) ModelState{
		func(m ModelState) ModelState { return m },
		func(m ModelState) ModelState { m.Missing = nil; return m },
		func(m ModelState) ModelState { return ModelState{State: m.State, Reason: clip(m.Reason, 80)} },
		func(m ModelState) ModelState { return ModelState{State: m.State} },
	}
	for i, trim := range levels {
		s := base
		s.Trimmed = i > 0
		s.Models = make(map[string]ModelState, len(states))
		for _, m := range states {
			s.Models[cleanText(m.Name, maxNameOnNode)] = trim(nodeSafe(m))
		}
		if b, _ := json.Marshal(s); len(b) <= limit {
			return string(b)
		}
	}
	// Still too big: keep as many bare states as fit, in name order.
	s := base
	s.Trimmed = true
	s.Models = map[string]ModelState{}
	for i, m := range states {
		s.Models[cleanText(m.Name, maxNameOnNode)] = ModelState{State: m.State}
		s.Omitted = len(states) - i - 1
		if b, _ := json.Marshal(s); len(b) > limit {
			delete(s.Models, m.Name)
			s.Omitted = len(states) - i
			break
		}
	}
	b, _ := json.Marshal(s)
	return string(b)
}

func condition(states []ModelState) Condition {
	if len(states) == 0 {
		return Condition{corev1.ConditionTrue, "NoModelsWanted", "no configured model selects this node"}
	}
	var warm, failed int
	var notes []string
	for _, s := range states {
		switch s.State {
		case nodelabels.StateWarm:
			warm++
		case nodelabels.StateFailed:
			failed++
			notes = append(notes, fmt.Sprintf("%s failed: %s", s.Name, s.Reason))
		default:
			notes = append(notes, fmt.Sprintf("%s is %s, missing %s", s.Name, s.State, strings.Join(s.Missing, ", ")))
		}
	}
	if warm == len(states) {
		return Condition{corev1.ConditionTrue, "AllModelsWarm", fmt.Sprintf("all %d model(s) warm", warm)}
	}
	reason := "ModelsNotWarm"
	if failed > 0 {
		reason = "ModelFailed"
	}
	msg := fmt.Sprintf("%d/%d model(s) warm; %s", warm, len(states), strings.Join(notes, "; "))
	if failed > 0 {
		// The hint must survive the cut: it is where the operator finds the whole error.
		hint := " (" + statusHint + ")"
		msg = cleanText(msg, conditionMsgLimit-len(hint)) + hint
	}
	return Condition{corev1.ConditionFalse, reason, cleanText(msg, conditionMsgLimit)}
}
