package status

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/readiness"
	"warmd.io/warmd/pkg/state"
)

func renderReadiness(w io.Writer, st *api.RawStatus, now time.Time) error {
	var s readiness.Status
	if _, err := st.Section(state.SectionReadiness, &s); err != nil {
		return err
	}
	return WriteReadiness(w, s, now)
}

// WriteReadiness writes the readiness section for people: whether the node is warm, what warmd last
// did to its Node object, and one row per wanted model with what it still lacks.
func WriteReadiness(w io.Writer, s readiness.Status, now time.Time) error {
	warm := "NOT WARM"
	if s.Warm {
		warm = "warm"
	}
	fmt.Fprintf(w, "READINESS on Node %s: %s (%s: %s)", s.Node, warm, readiness.ConditionType, orDash(s.Condition.Reason))
	if s.StartupTaint {
		fmt.Fprintf(w, ", startup taint %s:NoSchedule on", readiness.TaintCold)
	}
	fmt.Fprintln(w)
	if r := s.LastSync; r != nil {
		switch {
		case r.NodeMissing:
			fmt.Fprintf(w, "  Node object not found: waiting for the kubelet to register %s\n", s.Node)
		case r.Error != "":
			fmt.Fprintf(w, "  last update FAILED %s ago (retrying): %s\n", now.Sub(r.Time).Truncate(time.Second), firstLine(r.Error))
		default:
			fmt.Fprintf(w, "  Node in sync as of %s ago\n", now.Sub(r.Time).Truncate(time.Second))
		}
		if len(r.Blocked) > 0 {
			fmt.Fprintf(w, "  left alone (owned by another field manager): %s\n", strings.Join(r.Blocked, ", "))
		}
	}
	names := make([]string, 0, len(s.Models))
	for n := range s.Models {
		names = append(names, n)
	}
	slices.Sort(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODEL\tSTATE\tMISSING")
	for _, n := range names {
		m := s.Models[n]
		detail := strings.Join(m.Missing, "; ")
		if m.State == readiness.StateFailed {
			detail = m.Reason
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", n, m.State, orDash(firstLine(detail)))
	}
	if len(names) == 0 {
		fmt.Fprintln(tw, "  (no model selects this node)\t\t")
	}
	return tw.Flush()
}
