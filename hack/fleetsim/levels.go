package main

import (
	"fmt"
	"math"
)

// imageLayers are the blob sizes (bytes) of the image row: a 9 GB vLLM image, a few large layers
// (CUDA, PyTorch, vLLM's wheels) and small ones. A blob is verified only whole, by its digest, so an
// image is shared at most file-level (blob by blob).
var imageLayers = []float64{4.0e9, 2.2e9, 1.1e9, 0.6e9, 0.4e9, 0.3e9, 0.2e9, 0.1e9, 0.05e9, 0.05e9}

// levelsOpts are the unit model's inputs beside params.
type levelsOpts struct {
	Files    int     // files of the model (file-level units)
	PieceMiB float64 // multipart part size (piece-level units)
	pol      unitPolicy
}

// goal is issue 28's: 100 nodes joining beside 8 warm, 140 GiB, piece-level.
const (
	goalMinutes = 6.0
	goalCopies  = 2.0
)

// levelsTable prints, per scenario, the scale-out with no peers, with whole-revision serving (what
// warmd does), file-level and piece-level serving, and the piece-sharing bound; then the goal line.
func levelsTable(p params, o levelsOpts) {
	fmt.Printf("model %.0f GiB in %d files, parts %.0f MiB, node %.2f GB/s, origin %.2f GB/s, peer upload %.3f GB/s, K %d, slots %d, one-slot %v\n\n",
		p.Model/(1<<30), o.Files, o.PieceMiB, p.NodeRate/1e9, p.OriginCap/1e9, p.UploadCap/1e9, p.K, o.pol.Slots, o.pol.OneSlot)
	fmt.Println("| scenario | no peers | whole revision (warmd today) | file-level | piece-level | piece-sharing bound |")
	fmt.Println("|---|---|---|---|---|---|")
	var goalRow result
	for _, s := range []struct {
		name   string
		edit   func(*params)
		layers bool // the image row: units are the image's blobs
	}{
		{"100 join, 8 warm (scale-out of a served model)", func(*params) {}, false},
		{"100 join, 0 warm (a new model)", func(q *params) { q.Warm = 0 }, false},
		{"100 join, 8 warm, upload cap doubled (512 MiB/s)", func(q *params) { q.UploadCap *= 2 }, false},
		{"100 join, 8 warm, origin ⅛ of a node (as bench-fleet)", func(q *params) { q.OriginCap = q.NodeRate / 8 }, false},
		{"image: 9 GB, 100 join, 8 warm", func(q *params) { q.Model = sum(imageLayers) }, true},
	} {
		q := p
		s.edit(&q)
		none := simulate(q, policy{})
		whole := simulateUnits(q, units(q.Model, 1), o.pol)
		cells := []string{cell(none, q), cell(whole, q)}
		if s.layers {
			cells = append(cells, cell(simulateUnits(q, imageLayers, o.pol), q), "— (a blob is verified whole)")
		} else {
			file := simulateUnits(q, units(q.Model, o.Files), o.pol)
			piece := simulateUnits(q, units(q.Model, int(math.Ceil(q.Model/(o.PieceMiB*(1<<20))))), o.pol)
			cells = append(cells, cell(file, q), cell(piece, q))
			if goalRow.AllWarm == 0 {
				goalRow = piece
			}
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", s.name, cells[0], cells[1], cells[2], cells[3], cell(ideal(q), q))
	}
	met := "met"
	if goalRow.AllWarm/60 > goalMinutes || goalRow.OriginBytes/p.Model > goalCopies {
		met = "missed"
	}
	b := ideal(p)
	fmt.Printf("\ngoal (issue 28), piece-level, 100 join beside 8 warm: ≤ %.0f min, ≤ %.0f origin copies; the model gives %.1f min, %.2f copies: %s (the bound at this upload cap: %.1f min)\n",
		goalMinutes, goalCopies, goalRow.AllWarm/60, goalRow.OriginBytes/p.Model, met, b.AllWarm/60)
}

// cell is one scenario's cost: minutes until all are warm, and origin bytes in copies of the model.
func cell(r result, p params) string {
	if math.IsInf(r.AllWarm, 1) {
		return "never"
	}
	return fmt.Sprintf("%.1f min, %.2f copies", r.AllWarm/60, r.OriginBytes/p.Model)
}

func sum(s []float64) float64 {
	t := 0.0
	for _, v := range s {
		t += v
	}
	return t
}
