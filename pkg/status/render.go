// Package status renders for people what `warmd status` shows: the node state (/v1/status) as a
// header, then one section per part, and the cluster view (`--cluster`: every Node × model, from the
// labels and annotations warmd published, cluster.go). Each part's section renderer lives beside this
// file; sections no renderer knows are listed by name so nothing the daemon reports is hidden. It does
// no I/O beyond writing to the given writer: fetching the status or the Nodes is the caller's.
package status

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/compilekey/check"
	"warmd.io/warmd/pkg/daemon/daemonstatus"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prewarm"
	"warmd.io/warmd/pkg/readiness"
)

// SectionRenderer writes one status section for people.
type SectionRenderer func(w io.Writer, st *api.RawStatus, now time.Time) error

// renderers, in display order: what an operator looks at first comes first. The gpu, config, weights
// and readiness sections are folded into the header and MODELS; `warmd gpu` and -o json show them whole.
var renderers = []struct {
	section string
	render  SectionRenderer
}{
	{readiness.Section.Name(), renderModels},
	{prefetch.ImagesSection.Name(), renderImages},
	{cache.Section.Name(), renderCache},
	{prewarm.Section.Name(), renderPrewarm},
	{check.Section.Name(), renderCompileKey},
	{phases.Section.Name(), renderPhases},
}

// folded are the sections the header and MODELS already show.
var folded = []string{daemonstatus.Section.Name(), daemonstatus.ConfigSection.Name(), nvml.Section.Name(), prefetch.WeightsSection.Name()}

// Options change how the status is drawn.
type Options struct {
	// Color marks warm/not warm and problems with ANSI colours (only on a terminal).
	Color bool
}

// Render writes the whole status: a header (node, GPU SKU, warm or not, uptime), one section per
// part, and the problems an operator has to act on.
func Render(w io.Writer, st *api.RawStatus, now time.Time, o Options) error {
	d, _, err := daemonstatus.Section.Decode(st.Sections)
	if err != nil {
		return err
	}
	paint := func(code, s string) string {
		if !o.Color {
			return s
		}
		return "\x1b[" + code + "m" + s + "\x1b[0m"
	}
	up := now.Sub(d.Started).Truncate(time.Second)
	stopping := ""
	if d.Stopping {
		stopping = ", stopping"
	}
	fmt.Fprintf(w, "Node:    %s (warmd %s, pid %d, up %s%s)\n", d.NodeName, d.Version, d.PID, up, stopping)
	if g, ok, _ := nvml.Section.Decode(st.Sections); ok {
		fmt.Fprintf(w, "GPU:     %s\n", gpuLine(g))
	}
	if r, ok, _ := readiness.Section.Decode(st.Sections); ok {
		warm := 0
		for _, m := range r.Models {
			if m.State == nodelabels.StateWarm {
				warm++
			}
		}
		verdict := paint("1;31", "NO")
		if r.Warm {
			verdict = paint("1;32", "yes")
		}
		where := "Node " + r.Node
		switch {
		case r.LastSync == nil && !r.NodeKnown:
			where = "not published (readiness disabled or Node not read yet)"
		case r.LastSync != nil && r.LastSync.Error == "":
			where += " in sync"
		}
		fmt.Fprintf(w, "Warm:    %s (%d/%d models warm; %s)\n", verdict, warm, len(r.Models), where)
	} else {
		fmt.Fprintln(w, "Warm:    unknown (no readiness yet)")
	}
	fmt.Fprintf(w, "Config:  %s (reloads: %d", d.ConfigFile, d.Reloads)
	if d.LastReload != nil && !d.LastReload.Applied {
		fmt.Fprintf(w, "; last change %s at %s", paint("1;31", "REJECTED"), d.LastReload.Time.Format(time.RFC3339))
	}
	fmt.Fprintln(w, ")")
	known := map[string]bool{}
	for _, f := range folded {
		known[f] = true
	}
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
	fmt.Fprintln(w)
	renderProblems(w, st)
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

// gpuLine is the GPU inventory in one line: count, product, SKU key.
func gpuLine(g nvml.Status) string {
	inv := g.Inventory
	if !inv.Present {
		return fmt.Sprintf("none (%s); SKU %s, compile caches not keyed", orDash(inv.Reason), orDash(inv.SKU))
	}
	products := map[string]int{}
	var order []string
	for _, dev := range inv.Devices {
		if products[dev.Product] == 0 {
			order = append(order, dev.Product)
		}
		products[dev.Product]++
	}
	parts := make([]string, 0, len(order))
	for _, p := range order {
		parts = append(parts, fmt.Sprintf("%d× %s", products[p], p))
	}
	return fmt.Sprintf("%s, SKU %s", strings.Join(parts, " + "), inv.SKU)
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
