package phases

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// colours per phase, chosen to stay apart in print and for common colour blindness.
var phaseColour = map[string]string{
	PhaseImagePull:        "#bcbddc",
	PhaseImports:          "#8c8c8c",
	PhaseEngineStart:      "#6baed6",
	PhaseWeightsDownload:  "#9e9ac8",
	PhaseWeightLoad:       "#3182bd",
	PhaseTorchCompile:     "#e6550d",
	PhaseKVCacheAndWarmup: "#31a354",
	PhaseGraphCapture:     "#fdae6b",
	PhaseServerUp:         "#756bb1",
	PhaseFirstHealth:      "#636363",
}

const (
	svgWidth  = 1100
	svgLabelW = 190
	svgRightW = 90
	svgRowH   = 22
)

// WriteSVG writes a waterfall chart: one block per start, one bar per phase on a shared time axis,
// the compile-cache verdict marked on the block title and the torch.compile bar. It is a standalone
// SVG file (no scripts, no external fonts), so it can go straight into a ticket.
func WriteSVG(w io.Writer, rs []Result) error {
	maxT := 1.0
	for _, r := range rs {
		for _, p := range r.Phases {
			maxT = math.Max(maxT, p.Start+p.Seconds)
		}
		if r.TotalSeconds != nil {
			maxT = math.Max(maxT, *r.TotalSeconds)
		}
	}
	step := tickStep(maxT)
	axisEnd := math.Ceil(maxT/step) * step
	plotW := float64(svgWidth - svgLabelW - svgRightW)
	x := func(t float64) float64 { return svgLabelW + t/axisEnd*plotW }

	var b strings.Builder
	y := 20
	blocks := make([]string, 0, len(rs))
	for _, r := range rs {
		var g strings.Builder
		title := fmt.Sprintf("%s — vLLM %s, %s, TP %s, %s", shortSource(r.Source), dash(r.VLLMVersion), dash(r.Engine),
			tpString(r.TensorParallelSize), r.Outcome)
		fmt.Fprintf(&g, `<text x="10" y="%d" class="title">%s</text>`+"\n", y+14, esc(title))
		fmt.Fprintf(&g, `<rect x="%d" y="%d" width="170" height="18" rx="4" fill="%s"/>`+"\n", svgWidth-svgRightW-170, y+1, cacheColour(r.CompileCache))
		fmt.Fprintf(&g, `<text x="%d" y="%d" class="badge">compile cache: %s</text>`+"\n", svgWidth-svgRightW-85, y+14, esc(strings.ToUpper(string(r.CompileCache))))
		y += 26
		if r.TotalSeconds != nil { // behind the bars and their labels
			fmt.Fprintf(&g, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="total"/>`+"\n", x(*r.TotalSeconds), y, x(*r.TotalSeconds), y+len(r.Phases)*svgRowH)
		}
		for _, p := range r.Phases {
			fmt.Fprintf(&g, `<text x="%d" y="%d" class="label">%s</text>`+"\n", svgLabelW-8, y+15, esc(Labels[p.Name]))
			pieces := p.pieces
			if len(pieces) == 0 { // a Result read back from JSON
				pieces = [][2]float64{{p.Start, p.Start + p.Seconds}}
			}
			end := 0.0 // the label goes after the first piece: later pieces are short tails
			for i, pc := range pieces {
				wd := math.Max(x(pc[1])-x(pc[0]), 1)
				fmt.Fprintf(&g, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %.1f s</title></rect>`+"\n",
					x(pc[0]), y+3, wd, svgRowH-6, phaseColour[p.Name], esc(Labels[p.Name]), pc[1]-pc[0])
				if i == 0 {
					end = x(pc[0]) + wd
				}
			}
			note := fmt.Sprintf("%.1f s", p.Seconds)
			if p.Name == PhaseTorchCompile {
				note += " (cache " + string(r.CompileCache) + ")"
			}
			fmt.Fprintf(&g, `<text x="%.1f" y="%d" class="val">%s</text>`+"\n", end+4, y+15, esc(note))
			y += svgRowH
		}
		if len(r.Phases) == 0 {
			fmt.Fprintf(&g, `<text x="%d" y="%d" class="label">(no timed phases in this log)</text>`+"\n", svgLabelW+180, y+15)
			y += svgRowH
		}
		if r.TotalSeconds != nil {
			fmt.Fprintf(&g, `<text x="%.1f" y="%d" class="val">total %.1f s</text>`+"\n", x(*r.TotalSeconds)+4, y+12, *r.TotalSeconds)
			y += 14
		}
		if r.Error != "" {
			fmt.Fprintf(&g, `<text x="10" y="%d" class="err">failed: %s</text>`+"\n", y+14, esc(r.Error))
			y += 20
		}
		y += 14
		blocks = append(blocks, g.String())
	}
	axisY := y
	height := axisY + 40
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", svgWidth, height, svgWidth, height)
	b.WriteString(`<style>text{font-family:sans-serif;font-size:12px;fill:#222}.title{font-weight:bold;font-size:13px}` +
		`.label{text-anchor:end}.badge{text-anchor:middle;fill:#fff;font-weight:bold}.val{fill:#444}.err{fill:#b00}` +
		`.grid{stroke:#ddd}.total{stroke:#888;stroke-dasharray:4 3}.tick{text-anchor:middle;fill:#666}</style>` + "\n")
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", svgWidth, height)
	for t := 0.0; t <= axisEnd+1e-9; t += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="10" x2="%.1f" y2="%d" class="grid"/>`+"\n", x(t), x(t), axisY)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="tick">%gs</text>`+"\n", x(t), axisY+16, t)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" class="tick">seconds since process start (image pull start when known)</text>`+"\n", svgLabelW+int(plotW/2), axisY+32)
	for _, g := range blocks {
		b.WriteString(g)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func tickStep(maxT float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600} {
		if maxT/s <= 12 {
			return s
		}
	}
	return math.Ceil(maxT/12/3600) * 3600
}

func cacheColour(c CompileCache) string {
	switch c {
	case CacheHit:
		return "#2ca25f"
	case CacheMiss:
		return "#de2d26"
	case CacheDisabled:
		return "#737373"
	}
	return "#bdbdbd"
}

func tpString(n int) string {
	if n == 0 {
		return "?"
	}
	return fmt.Sprint(n)
}

func esc(s string) string { return html.EscapeString(s) }
