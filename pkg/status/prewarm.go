package status

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/prewarm"
)

// shownRecent bounds the ended pre-warms listed (the JSON has up to ten).
const shownRecent = 3

func renderPrewarm(w io.Writer, st *api.RawStatus, now time.Time) error {
	s, _, err := prewarm.Section.Decode(st.Sections)
	if err != nil {
		return err
	}
	return WritePrewarm(w, s, now)
}

// WritePrewarm writes the page-cache pre-warm section for people: the caps, then one row per running
// pre-warm and the last few that ended, with how much of the model each read.
func WritePrewarm(w io.Writer, s prewarm.Status, now time.Time) error {
	fmt.Fprintf(w, "PRE-WARM (page cache, at most %s or %d%% of MemAvailable per start)", cacheSize(s.MaxBytes), s.MemAvailablePercent)
	if s.State == prewarm.StateDisabled {
		fmt.Fprint(w, ": disabled (prewarm.disabled is set; a reload that clears it starts pre-warming)")
	} else if len(s.Active)+len(s.Recent) == 0 {
		fmt.Fprint(w, ": no vLLM pod started here yet")
	}
	fmt.Fprintln(w)
	if s.Problem != "" {
		fmt.Fprintf(w, "  problem: %s\n", firstLine(s.Problem))
	}
	rows := append(append([]prewarm.Run{}, s.Active...), s.Recent[:min(len(s.Recent), shownRecent)]...)
	if len(rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODEL\tPOD\tOUTCOME\tREAD\tWHEN")
	for _, r := range rows {
		when := "started " + now.Sub(r.Started).Truncate(time.Second).String() + " ago"
		if !r.Ended.IsZero() {
			when = fmt.Sprintf("took %s, %s ago", r.Ended.Sub(r.Started).Round(100*time.Millisecond), now.Sub(r.Ended).Truncate(time.Second))
		}
		outcome := r.Outcome
		if r.Reason != "" {
			outcome += " (" + firstLine(r.Reason) + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s of %s\t%s\n", r.Model, r.Pod, outcome, cacheSize(r.Bytes), cacheSize(r.Total), when)
	}
	return tw.Flush()
}
