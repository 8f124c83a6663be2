package status

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/compilekey/check"
)

func renderCompileKey(w io.Writer, st *api.RawStatus, now time.Time) error {
	s, _, err := check.Section.Decode(st.Sections)
	if err != nil {
		return err
	}
	return WriteCompileKey(w, s, now)
}

// WriteCompileKey writes the compile-cache key check for people: how many recorded starts a pod is
// compared with, the agreement of past predictions with the logs, then one row per vLLM pod waiting to
// start (its prediction and, on a miss, the inputs that differ) and the last few checked.
func WriteCompileKey(w io.Writer, s check.Status, now time.Time) error {
	if s.Disabled {
		_, err := fmt.Fprintln(w, "COMPILE-CACHE KEY CHECK: disabled (compileCache.disabled is set)")
		return err
	}
	fmt.Fprintf(w, "COMPILE-CACHE KEY CHECK (%d cached start(s) compared; predictions checked: %d agree, %d disagree, %d undecided)\n",
		s.Cached, s.Agree, s.Disagree, s.Undecided)
	if s.Problem != "" {
		fmt.Fprintf(w, "  problem: %s\n", firstLine(s.Problem))
	}
	rows := append(append([]check.Check{}, s.Pending...), s.Recent[:min(len(s.Recent), shownRecent)]...)
	if len(rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  POD\tMODEL\tPREDICTED\tOBSERVED\tWHY")
	for _, c := range rows {
		obs := "pending"
		switch {
		case c.Observed != "":
			obs = string(c.Observed) + " (" + c.Agreement + ")"
		case c.Started:
			obs = "starting"
		}
		why := ""
		switch {
		case len(c.Differs) > 0:
			why = "differs: " + strings.Join(c.Differs, ", ")
		case len(c.Unknown) > 0:
			why = "unknown: " + strings.Join(c.Unknown, ", ")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s (%s ago)\n", c.Pod, orDash(c.Model), c.Predicted, obs, orDash(why),
			now.Sub(c.Checked).Truncate(time.Second))
	}
	return tw.Flush()
}
