package extender

import (
	"context"
	"log/slog"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// maxLoggedNodes bounds the Nodes one decision line names: a 5,000-Node request must not become a
// 5,000-entry log line.
const maxLoggedNodes = 10

// Decisions are logged so an operator can answer "why did this pod land there?" from the extender's
// own logs: at info one line per decision about a pod that names a model (the fastest Node and its
// prediction, or which Nodes were filtered out and why); at debug every request, with the top
// scores. Pods without a model are neutral and logged at debug only. Nothing is built when the
// level is off, so the hot path stays allocation-free.

func podRef(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	return p.Namespace + "/" + p.Name
}

func (x *Extender) logFilter(pod *corev1.Pod, model string, candidates int, failed extenderv1.FailedNodesMap) {
	ctx := context.Background()
	level := slog.LevelDebug
	if model != "" && len(failed) > 0 {
		level = slog.LevelInfo
	}
	if !x.log.Enabled(ctx, level) {
		return
	}
	names := make([]string, 0, len(failed))
	for n := range failed {
		names = append(names, n)
	}
	slices.Sort(names)
	more := max(0, len(names)-maxLoggedNodes)
	names = names[:min(len(names), maxLoggedNodes)]
	x.log.Log(ctx, level, "extender filter", "pod", podRef(pod), "model", model, "candidates", candidates,
		"filteredOut", len(failed), "failedNodes", names, "moreFailedNodes", more, "reason", "model failed on the node (--filter-failed)")
}

func (x *Extender) logPrioritize(pod *corev1.Pod, model string, list extenderv1.HostPriorityList, predicted int) {
	ctx := context.Background()
	level := slog.LevelDebug
	if model != "" {
		level = slog.LevelInfo
	}
	if !x.log.Enabled(ctx, level) {
		return
	}
	attrs := []any{"pod", podRef(pod), "model", model, "candidates", len(list), "withPrediction", predicted}
	if model == "" {
		x.log.Log(ctx, level, "extender prioritize: pod names no model, neutral scores", attrs...)
		return
	}
	top := slices.Clone(list)
	slices.SortStableFunc(top, func(a, b extenderv1.HostPriority) int {
		if a.Score != b.Score {
			return int(b.Score - a.Score)
		}
		return 0
	})
	if len(top) > 0 && top[0].Score > extenderv1.MinExtenderPriority {
		attrs = append(attrs, "fastestNode", top[0].Host, "fastestScore", top[0].Score)
		if info, ok := x.index.Get(top[0].Host); ok {
			if s, ok := info.Predicted[model]; ok {
				attrs = append(attrs, "fastestPredictedSeconds", s)
			}
		}
	} else {
		attrs = append(attrs, "fastestNode", "", "note", "no candidate has a prediction for the model: scores are neutral")
	}
	if x.log.Enabled(ctx, slog.LevelDebug) {
		scores := make([]string, 0, min(len(top), maxLoggedNodes))
		for _, h := range top[:min(len(top), maxLoggedNodes)] {
			scores = append(scores, h.Host+"="+strconv.FormatInt(h.Score, 10))
		}
		attrs = append(attrs, "topScores", scores)
	}
	x.log.Log(ctx, level, "extender prioritize", attrs...)
}
