package status

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/readiness"
	"warmd.io/warmd/pkg/units"
)

// renderModels writes one row per model this node wants: its warm state, the weights' progress (a bar
// while downloading, with rate and ETA), the predicted seconds from pod start to ready, and the path to
// give vLLM; then what each model still lacks.
func renderModels(w io.Writer, st *api.RawStatus, now time.Time) error {
	r, _, err := readiness.Section.Decode(st.Sections)
	if err != nil {
		return err
	}
	ws, _, err := prefetch.WeightsSection.Decode(st.Sections)
	if err != nil {
		return err
	}
	pred := map[string]float64{}
	if r.Predictions != nil {
		for _, p := range r.Predictions.Predictions {
			pred[p.Model] = p.Seconds
		}
	}
	names := make([]string, 0, len(r.Models))
	for n := range r.Models {
		names = append(names, n)
	}
	slices.Sort(names)
	budget := "no budget"
	if ws.BudgetBytes > 0 {
		budget = "budget " + units.Bytes(ws.BudgetBytes)
	}
	fmt.Fprintf(w, "MODELS (weights in %s: %s used, %s)\n", orDash(ws.CacheRoot), units.Bytes(ws.UsedBytes), budget)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODEL\tSTATE\tWEIGHTS\tRATE\tETA\tREADY IN\tPATH")
	for _, n := range names {
		m := r.Models[n]
		weights, rate, eta, path := "-", "-", "-", "-"
		if wm, ok := ws.Model(n); ok {
			weights = progress(wm)
			if wm.State == prefetch.StateDownloading && wm.BytesPerSecond > 0 {
				rate = fmt.Sprintf("%s/s", units.Bytes(int64(wm.BytesPerSecond)))
				eta = (time.Duration(wm.ETASeconds) * time.Second).String()
			}
			path = orDash(wm.SnapshotPath)
		}
		ready := "-"
		if s, ok := pred[n]; ok {
			ready = fmt.Sprintf("%.0fs", math.Ceil(s))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", n, m.State, weights, rate, eta, ready, path)
	}
	if len(names) == 0 {
		fmt.Fprintln(tw, "  (no model selects this node)\t\t\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range names {
		m := r.Models[n]
		if m.State != nodelabels.StateWarm && m.State != nodelabels.StateFailed && len(m.Missing) > 0 {
			fmt.Fprintf(w, "  %s needs: %s\n", n, strings.Join(m.Missing, "; "))
		}
	}
	for _, n := range names {
		if wm, ok := ws.Model(n); ok && wm.From != nil {
			fmt.Fprintf(w, "  %s %s\n", n, byteSources(*wm.From))
		}
		if wm, ok := ws.Model(n); ok && wm.Servable != nil && wm.State != prefetch.StateReady {
			fmt.Fprintf(w, "  %s %s\n", n, servable(*wm.Servable))
		}
	}
	return nil
}

// servable says what of a download in flight this node's peers may read from it already.
func servable(s prefetch.Servable) string {
	out := fmt.Sprintf("serving peers before it publishes: %d file(s) verified whole", s.Files)
	if s.PartFiles > 0 {
		out += fmt.Sprintf(", %s verified in parts of %d more", units.Bytes(s.PartBytes), s.PartFiles)
	}
	return out
}

// byteSources says where a download's bytes came from (peers.enabled).
func byteSources(b prefetch.ByteSources) string {
	s := fmt.Sprintf("bytes: %s from %d peer(s)", units.Bytes(b.PeerBytes), len(b.Peers))
	if len(b.Peers) > 0 {
		s += " (" + strings.Join(b.Peers, ", ") + ")"
	}
	s += fmt.Sprintf(", %s from the origin", units.Bytes(b.OriginBytes))
	if len(b.Dropped) > 0 {
		s += "; dropped " + strings.Join(b.Dropped, ", ")
	}
	return s
}

// progress is the weights' bytes as a 20-cell bar while downloading, else bytes and state.
func progress(m prefetch.ModelStatus) string {
	if m.BytesTotal <= 0 {
		return string(m.State)
	}
	if m.State == prefetch.StateReady {
		return fmt.Sprintf("%s verified", units.Bytes(m.BytesTotal))
	}
	return fmt.Sprintf("%s %s/%s %s", textBar(m.BytesDone, m.BytesTotal, 20), units.Bytes(m.BytesDone), units.Bytes(m.BytesTotal), m.State)
}
