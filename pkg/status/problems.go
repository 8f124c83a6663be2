package status

import (
	"fmt"
	"io"
	"strings"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/daemon/daemonstatus"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/readiness"
)

// Problems lists, for people, everything in the status that needs an operator: rejected config edits,
// failed images and models, cache and GPU errors, Node writes that fail. Each part's reason already
// names the fix where one is known; here they are gathered in one place, one line each.
func Problems(st *api.RawStatus) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if d, ok, _ := daemonstatus.Section.Decode(st.Sections); ok {
		if d.LastReload != nil && !d.LastReload.Applied {
			add("config: the last edit of %s was rejected, the previous config keeps running: %s", d.ConfigFile, firstLine(d.LastReload.Error))
		}
		for _, p := range d.Problems {
			add("daemon: %s", p)
		}
	}
	if g, ok, _ := nvml.Section.Decode(st.Sections); ok && g.LastError != "" {
		add("gpu: %s", firstLine(g.LastError))
	}
	if im, ok, _ := prefetch.ImagesSection.Decode(st.Sections); ok {
		if im.Error != "" {
			add("images: %s", firstLine(im.Error))
		}
		for _, i := range im.Images {
			if i.State == prefetch.StateFailed {
				add("image %s: %s", i.Ref, firstLine(i.Reason))
			}
		}
	}
	if ws, ok, _ := prefetch.WeightsSection.Decode(st.Sections); ok {
		for _, m := range ws.Models {
			if m.State == prefetch.StateFailed {
				add("weights %s: %s", m.Model, firstLine(m.Reason))
			}
		}
	}
	if cs, ok, _ := cache.Section.Decode(st.Sections); ok && cs.State == cache.StateError {
		add("compile cache: %s", firstLine(cs.Message))
	}
	if ph, ok, _ := phases.Section.Decode(st.Sections); ok {
		for _, p := range ph.Problems {
			add("phases: %s", firstLine(p))
		}
	}
	if r, ok, _ := readiness.Section.Decode(st.Sections); ok && r.LastSync != nil {
		switch {
		case r.LastSync.NodeMissing:
			add("readiness: Node %s does not exist yet; warmd never creates Nodes (the kubelet registers it)", r.Node)
		case r.LastSync.Error != "":
			add("readiness: writing Node %s fails (retrying): %s", r.Node, firstLine(r.LastSync.Error))
		}
		if len(r.LastSync.Blocked) > 0 {
			add("readiness: left alone on Node %s, another field manager owns them: %s", r.Node, strings.Join(r.LastSync.Blocked, ", "))
		}
	}
	return out
}

func renderProblems(w io.Writer, st *api.RawStatus) {
	ps := Problems(st)
	fmt.Fprintf(w, "PROBLEMS (%d)\n", len(ps))
	if len(ps) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, p := range ps {
		fmt.Fprintf(w, "  - %s\n", p)
	}
}
