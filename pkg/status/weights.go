package status

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/state"
)

func renderWeights(w io.Writer, st *api.RawStatus, now time.Time) error {
	var s prefetch.WeightsStatus
	if _, err := st.Section(state.SectionWeights, &s); err != nil {
		return err
	}
	return WriteWeights(w, s, now)
}

// WriteWeights writes the weights section for people: the cache root and budget, then one row per
// wanted model with its progress (bytes, rate, ETA) or the snapshot path to load, and failure reasons.
func WriteWeights(w io.Writer, s prefetch.WeightsStatus, _ time.Time) error {
	budget := "no budget"
	if s.BudgetBytes > 0 {
		budget = "budget " + sizeStr(s.BudgetBytes)
	}
	fmt.Fprintf(w, "WEIGHTS in %s (%s used, %s)\n", s.CacheRoot, sizeStr(s.UsedBytes), budget)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODEL\tREVISION\tSTATE\tPROGRESS\tRATE\tETA\tSNAPSHOT")
	for _, m := range s.Models {
		progress := "-"
		if m.BytesTotal > 0 {
			progress = fmt.Sprintf("%s/%s %d%%", sizeStr(m.BytesDone), sizeStr(m.BytesTotal), m.BytesDone*100/m.BytesTotal)
		}
		rate, eta := "-", "-"
		if m.State == prefetch.StateDownloading && m.BytesPerSecond > 0 {
			rate = fmt.Sprintf("%.2f GB/s", m.BytesPerSecond/1e9)
			eta = (time.Duration(m.ETASeconds) * time.Second).String()
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Model, m.Revision, m.State, progress, rate, eta, orDash(m.SnapshotPath))
	}
	if len(s.Models) == 0 {
		fmt.Fprintln(tw, "  (no models wanted on this node)\t\t\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range s.Models {
		if m.Reason != "" {
			fmt.Fprintf(w, "  %s: %s\n", m.Model, firstLine(m.Reason))
		}
	}
	return nil
}

func sizeStr(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
