package status

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"warmd.io/warmd/pkg/extender"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/readiness"
)

// ClusterRow is one (Node, model) pair of the cluster view (`warmd status --cluster`): what warmd
// published on that Node for that model.
type ClusterRow struct {
	Model string `json:"model"`
	Node  string `json:"node"`
	SKU   string `json:"sku,omitempty"`
	// State is the models.warmd.io/<model> label (warm, weights, image, cold, failed).
	State string `json:"state"`
	// PredictedSeconds is the warmd.io/predicted-ready figure; nil when the Node has none.
	PredictedSeconds *float64 `json:"predictedSeconds,omitempty"`
	// NodeWarm is the warmd.io/warm label: every model this Node wants is warm.
	NodeWarm bool `json:"nodeWarm"`
	// Missing and Reason come from the warmd.io/status annotation (may be trimmed there).
	Missing []string `json:"missing,omitempty"`
	Reason  string   `json:"reason,omitempty"`
}

// ClusterFilter selects rows; empty fields match everything. Model matches the model id or its
// label-key name (org--name).
type ClusterFilter struct {
	Model string
	SKU   string
}

// ClusterRows builds the cluster view from Nodes: one row per Node and model warmd published
// something for, sorted by model, then fastest predicted first (no prediction last), then Node.
func ClusterRows(nodes []corev1.Node, f ClusterFilter) []ClusterRow {
	var rows []ClusterRow
	for i := range nodes {
		n := &nodes[i]
		sku := n.Labels[nodelabels.LabelSKU]
		if f.SKU != "" && sku != f.SKU {
			continue
		}
		info := extender.Info(n)
		status := readiness.ParseStatus(n.Annotations)
		models := map[string]bool{}
		for m := range status.Models {
			models[m] = true
		}
		for m := range info.Predicted {
			models[m] = true
		}
		keyOf := map[string]string{} // model → its label key on this Node
		known := map[string]bool{}
		for m := range models {
			keyOf[m] = model.LabelKey(m)
			known[keyOf[m]] = true
		}
		for k := range info.States {
			if !known[k] { // a label no annotation names: its id when the key is readable, else the key's name
				m := extender.LabelName(k)
				models[m], keyOf[m] = true, k
			}
		}
		for m := range models {
			if f.Model != "" && m != f.Model && keyOf[m] != model.LabelPrefix+f.Model {
				continue
			}
			r := ClusterRow{Model: m, Node: n.Name, SKU: sku, NodeWarm: n.Labels[nodelabels.LabelWarm] == "true"}
			r.State = info.States[keyOf[m]]
			if st, ok := status.Models[m]; ok {
				if r.State == "" {
					r.State = string(st.State)
				}
				r.Missing, r.Reason = st.Missing, st.Reason
			}
			if s, ok := info.Predicted[m]; ok {
				r.PredictedSeconds = &s
			}
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b ClusterRow) int {
		if c := strings.Compare(a.Model, b.Model); c != 0 {
			return c
		}
		pa, pb := math.Inf(1), math.Inf(1)
		if a.PredictedSeconds != nil {
			pa = *a.PredictedSeconds
		}
		if b.PredictedSeconds != nil {
			pb = *b.PredictedSeconds
		}
		if pa != pb {
			if pa < pb {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Node, b.Node)
	})
	return rows
}

// RenderCluster writes rows as a table; wide adds whether the Node is warm overall and what is missing.
func RenderCluster(w io.Writer, rows []ClusterRow, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "MODEL\tNODE\tSKU\tSTATE\tREADY IN"
	if wide {
		head += "\tNODE WARM\tMISSING"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		ready := "-"
		if r.PredictedSeconds != nil {
			ready = (time.Duration(math.Ceil(*r.PredictedSeconds)) * time.Second).String()
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", r.Model, r.Node, orDash(r.SKU), orDash(r.State), ready)
		if wide {
			missing := strings.Join(r.Missing, ", ")
			if r.Reason != "" {
				missing = strings.TrimPrefix(missing+"; "+r.Reason, "; ")
			}
			line += fmt.Sprintf("\t%v\t%s", r.NodeWarm, orDash(missing))
		}
		fmt.Fprintln(tw, line)
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "(no Node carries warmd labels for this selection)")
	}
	return tw.Flush()
}
