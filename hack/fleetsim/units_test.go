package main

import (
	"math"
	"testing"
)

// fleet is docs/fleet.md's scenario at a smaller size, so the test runs in a second: 20 nodes join
// beside 2 warm, a 14 GiB model.
func fleet() params {
	return params{Fleet: 100, ScaleOut: 20, Warm: 2, Model: 14 * (1 << 30), NodeRate: 2e9, OriginCap: 1.25e9, UploadCap: 0.268e9, K: 4}
}

// The unit model with one unit is whole-revision serving, which simulate models on its own terms:
// the two must agree, or one of them is wrong.
func TestUnitsWholeRevisionMatchesSimulate(t *testing.T) {
	for _, warm := range []int{0, 2} {
		p := fleet()
		p.Warm = warm
		a := simulate(p, policy{Peers: true, Slots: 2, Gate: 1, Refresh: true})
		b := simulateUnits(p, units(p.Model, 1), unitPolicy{Slots: 2})
		if math.Abs(a.AllWarm-b.AllWarm) > 0.05*a.AllWarm || math.Abs(a.OriginBytes-b.OriginBytes) > 0.05*p.Model+0.05*a.OriginBytes {
			t.Errorf("warm %d: simulate %.0f s, %.2f copies; units %.0f s, %.2f copies", warm,
				a.AllWarm, a.OriginBytes/p.Model, b.AllWarm, b.OriginBytes/p.Model)
		}
	}
}

// File- and piece-level serving beat whole-revision serving, none beats the bound, and every run
// delivers: a new model's bytes come from the origin at least once. (Piece-level is not always faster
// than file-level: with no warm node, the seed's upload cap holds back the parts only it has; see
// docs/fleet.md.)
func TestUnitsLevels(t *testing.T) {
	for _, one := range []bool{false, true} {
		p := fleet()
		p.Warm = 0
		pol := unitPolicy{Slots: 2, OneSlot: one}
		whole := simulateUnits(p, units(p.Model, 1), pol)
		file := simulateUnits(p, units(p.Model, 30), pol)
		piece := simulateUnits(p, units(p.Model, 224), pol)
		bound := ideal(p)
		for _, r := range []struct {
			name string
			r    result
		}{{"whole", whole}, {"file", file}, {"piece", piece}} {
			if r.r.AllWarm < bound.AllWarm || r.r.OriginBytes < bound.OriginBytes*0.999 || math.IsInf(r.r.AllWarm, 1) {
				t.Errorf("one-slot %v, %s: %.0f s, %.2f copies; bound %.0f s, 1 copy", one, r.name, r.r.AllWarm, r.r.OriginBytes/p.Model, bound.AllWarm)
			}
		}
		if file.AllWarm >= whole.AllWarm || piece.AllWarm >= whole.AllWarm {
			t.Errorf("one-slot %v: whole %.0f s, file %.0f s, piece %.0f s: serving files or parts as verified should be faster", one, whole.AllWarm, file.AllWarm, piece.AllWarm)
		}
	}
}
