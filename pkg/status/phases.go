package status

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/phases"
)

// recentStarts bounds the starts listed; -o json has them all.
const recentStarts = 10

func renderPhases(w io.Writer, st *api.RawStatus, now time.Time) error {
	s, _, err := phases.Section.Decode(st.Sections)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "vLLM STARTS (%d kept, %d starting now; pod logs %s)\n", len(s.Records), s.Following, s.PodLogDir)
	for _, p := range s.Problems {
		fmt.Fprintf(w, "  problem: %s\n", firstLine(p))
	}
	if len(s.Records) == 0 {
		fmt.Fprintln(w, "  (no vLLM start seen yet)")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  WHEN\tPOD\tMODEL\tOUTCOME\tCOMPILE CACHE\tTOTAL\tSLOWEST PHASE")
	for i, r := range s.Records {
		if i == recentStarts {
			fmt.Fprintf(tw, "  … %d older (warmd status -o json)\t\t\t\t\t\t\n", len(s.Records)-recentStarts)
			break
		}
		total := "-"
		if v, ok := r.Result.Phase(phases.PhaseTotal); ok {
			total = fmt.Sprintf("%.1fs", v)
		}
		slowest := "-"
		var top float64
		for _, p := range r.Result.Phases {
			if p.Seconds > top {
				top, slowest = p.Seconds, fmt.Sprintf("%s %.1fs", phases.Labels[p.Name], p.Seconds)
			}
		}
		outcome := string(r.Result.Outcome)
		if r.Result.Error != "" {
			outcome += ": " + phasesClip(r.Result.Error, 60)
		}
		fmt.Fprintf(tw, "  %s ago\t%s/%s#%d\t%s\t%s\t%s\t%s\t%s\n", now.Sub(r.Recorded).Truncate(time.Second),
			r.Namespace, r.Pod, r.Restart, orDash(r.Model), outcome, r.Result.CompileCache, total, slowest)
	}
	return tw.Flush()
}

func phasesClip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
