// Package status renders the node state (/v1/status) for people: a header, then one section per part.
// Each part's section renderer lives beside this file; sections no renderer knows are listed by name
// so nothing the daemon reports is hidden. It does no I/O beyond writing to the given writer.
package status

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/state"
)

// SectionRenderer writes one status section for people.
type SectionRenderer func(w io.Writer, st *api.RawStatus, now time.Time) error

// renderers, in display order. Parts add theirs here.
var renderers = []struct {
	section string
	render  SectionRenderer
}{
	{state.SectionConfig, renderConfig},
	{state.SectionGPU, renderGPU},
	{state.SectionImages, renderImages},
	{state.SectionWeights, renderWeights},
	{state.SectionCache, renderCache},
	{state.SectionPhases, renderPhases},
	{state.SectionReadiness, renderReadiness},
}

// Render writes the whole status.
func Render(w io.Writer, st *api.RawStatus, now time.Time) error {
	var d daemon.DaemonStatus
	if _, err := st.Section(state.SectionDaemon, &d); err != nil {
		return err
	}
	up := now.Sub(d.Started).Truncate(time.Second)
	fmt.Fprintf(w, "Node:    %s\n", d.NodeName)
	fmt.Fprintf(w, "Daemon:  warmd %s, pid %d, up %s%s\n", d.Version, d.PID, up, map[bool]string{true: " (stopping)"}[d.Stopping])
	fmt.Fprintf(w, "Config:  %s (reloads: %d", d.ConfigFile, d.Reloads)
	if d.LastReload != nil && !d.LastReload.Applied {
		fmt.Fprintf(w, "; last change REJECTED at %s: %s", d.LastReload.Time.Format(time.RFC3339), firstLine(d.LastReload.Error))
	}
	fmt.Fprintln(w, ")")
	known := map[string]bool{state.SectionDaemon: true}
	for _, r := range renderers {
		known[r.section] = true
		if _, ok := st.Sections[r.section]; !ok {
			continue
		}
		fmt.Fprintln(w)
		if err := r.render(w, st, now); err != nil {
			return err
		}
	}
	var other []string
	for name := range st.Sections {
		if !known[name] {
			other = append(other, name)
		}
	}
	if len(other) > 0 {
		slices.Sort(other)
		fmt.Fprintf(w, "\nAlso reported (see -o json): %s\n", strings.Join(other, ", "))
	}
	return nil
}

func renderConfig(w io.Writer, st *api.RawStatus, _ time.Time) error {
	var c daemon.ConfigSummary
	if _, err := st.Section(state.SectionConfig, &c); err != nil {
		return err
	}
	fmt.Fprintf(w, "CONFIGURED (data dir %s, image backend %s)\n", c.DataDir, c.Backend)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODEL\tREVISION\tSOURCE\tIMAGE")
	for _, m := range c.Models {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", m.Name, m.Revision, m.Source, orDash(m.Image))
	}
	if len(c.Models) == 0 {
		fmt.Fprintln(tw, "  (no models configured)\t\t\t")
	}
	for _, im := range c.Images {
		fmt.Fprintf(tw, "  image\t\t%s\t\n", im)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
