package phases

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// Labels are the seed table's row names for people.
var Labels = map[string]string{
	PhaseImagePull:        "image pull",
	PhaseImports:          "Python imports",
	PhaseEngineStart:      "engine start",
	PhaseWeightsDownload:  "weights download",
	PhaseWeightLoad:       "weight load",
	PhaseTorchCompile:     "torch.compile",
	PhaseKVCacheAndWarmup: "FlashInfer JIT + KV setup",
	PhaseGraphCapture:     "CUDA graph capture",
	PhaseServerUp:         "server up",
	PhaseFirstHealth:      "first 200 on /health",
	PhaseTotal:            "total",
}

// WriteJSON writes the contract: one object for one result, an array for several.
func WriteJSON(w io.Writer, rs []Result) error {
	var v any = rs
	if len(rs) == 1 {
		v = rs[0]
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode phases: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// WriteTable writes the seed's table: one row per phase, one column of seconds per log.
func WriteTable(w io.Writer, rs []Result) error {
	var rows [][]string // label, cells...
	row := func(label string, cells []string) { rows = append(rows, append([]string{label}, cells...)) }
	head := make([]string, len(rs))
	for i, r := range rs {
		head[i] = shortSource(r.Source)
	}
	row("PHASE (s)", head)
	for _, name := range PhaseOrder {
		cells := make([]string, len(rs))
		seen := false
		for i := range rs {
			cells[i] = "-"
			if v, ok := rs[i].Phase(name); ok {
				cells[i] = fmt.Sprintf("%.1f", v)
				seen = true
			}
		}
		if seen || name == PhaseTotal {
			row(Labels[name], cells)
		}
	}
	facts := []struct {
		label string
		get   func(Result) string
	}{
		{"compile cache", func(r Result) string { return string(r.CompileCache) }},
		{"outcome", func(r Result) string { return string(r.Outcome) }},
		{"vLLM", func(r Result) string { return dash(r.VLLMVersion) }},
		{"engine", func(r Result) string { return dash(r.Engine) }},
		{"tensor parallel", func(r Result) string {
			if r.TensorParallelSize == 0 {
				return "-"
			}
			return fmt.Sprint(r.TensorParallelSize)
		}},
		{"clock", func(r Result) string { return r.Clock }},
	}
	for _, f := range facts {
		cells := make([]string, len(rs))
		for i, r := range rs {
			cells[i] = f.get(r)
		}
		row(f.label, cells)
	}
	width := make([]int, len(rs)+1)
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "%-*s", width[0], r[0])
		for i, c := range r[1:] {
			fmt.Fprintf(&b, "  %*s", width[i+1], c)
		}
		b.WriteString("\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	for _, r := range rs {
		if r.Error != "" {
			fmt.Fprintf(w, "\n%s failed: %s\n", shortSource(r.Source), r.Error)
		}
	}
	return nil
}

func shortSource(s string) string {
	if s == "" || s == "-" {
		return "stdin"
	}
	return filepath.Base(s)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
