package main

import (
	"math"
	"math/bits"
)

// The unit model: what a node serves is a set of units it verified, and a unit is the whole revision
// (what warmd serves today: nothing until the last shard is published), one file (file-level serving:
// a file is served once it matches the origin's identity) or one multipart part (piece-level: a part
// is served once it matches the origin's part checksum). Every node that holds a unit another node
// lacks may serve it, joining nodes included, under the same slots and upload cap as simulate's peers.

// level is the unit of serving.
type level int

const (
	levelRevision level = iota
	levelFile
	levelPiece
)

func (l level) String() string {
	return [...]string{"whole revision", "file-level", "piece-level"}[l]
}

// unitPolicy is how the nodes share units.
type unitPolicy struct {
	Slots int // downloaders one node serves at once (peers.serveSlots; 0: all that ask)
	// OneSlot: a node that a slotless node asked for a slot in vain turns away, and takes back the
	// slot of, a downloader that holds a slot elsewhere too (issue 28's "one slot per downloader
	// while others wait"; warmd's peers.oneSlotWhileWaiting).
	OneSlot bool
	// RareOnly: the seed reads from the origin only units no node holds, never one a busy peer
	// holds, so the origin sends each byte once.
	RareOnly bool
}

// unitNode is one node's state in the unit model.
type unitNode struct {
	done  []uint64  // bit per unit: verified, so served
	got   []float64 // bytes of each unit it has (a warm node: all)
	left  int       // units still missing
	conns []int     // the nodes whose slots it holds
}

func (n *unitNode) has(u int) bool { return n.done[u/64]&(1<<(u%64)) != 0 }

// simulateUnits runs the unit model: sizes are the units' bytes (their sum the model). One node at a
// time reads the origin (the seed named by the model's Lease): the first joining node that lacks a
// unit no node holds yet, or that holds no slot; it reads the units no node holds first (so the origin
// sends each byte about once), else its own rarest missing ones. Every other node reads only peers,
// each of its slots carrying the rarest unit that peer holds and it lacks, and waits while no peer
// with a unit it lacks has a free slot (warmd does not send busy chunks to the origin from a node
// that is not the seed).
func simulateUnits(p params, sizes []float64, pol unitPolicy) result {
	const dt = 0.25
	nu := len(sizes)
	words := (nu + 63) / 64
	all := p.Warm + p.ScaleOut
	nodes := make([]*unitNode, all)
	holders := make([]int, nu) // per unit: nodes that serve it
	for i := range nodes {
		n := &unitNode{done: make([]uint64, words), got: make([]float64, nu), left: nu}
		if i < p.Warm {
			for u := range nu {
				n.done[u/64] |= 1 << (u % 64)
				n.got[u] = sizes[u]
				holders[u]++
			}
			n.left = 0
		}
		nodes[i] = n
	}
	active := make([]int, all) // per node: downloaders holding one of its slots
	useful := func(d, s int) bool {
		if d == s {
			return false
		}
		for w := range words {
			if nodes[s].done[w]&^nodes[d].done[w] != 0 {
				return true
			}
		}
		return false
	}
	// rarest is the unit d lacks that from (nil: any) holds, with the fewest holders; -1 if none.
	rarest := func(d int, from *unitNode, rareOnly bool) int {
		best := -1
		for w := range words {
			m := ^nodes[d].done[w]
			if from != nil {
				m &= from.done[w]
			}
			for m != 0 {
				u := w*64 + bits.TrailingZeros64(m)
				m &= m - 1
				if u >= nu || (rareOnly && holders[u] > 0) {
					continue
				}
				if best < 0 || holders[u] < holders[best] {
					best = u
				}
			}
		}
		return best
	}
	// take moves up to budget bytes into d's units, each picked by pick, and counts what completes.
	take := func(d int, budget float64, pick func() int) float64 {
		n, moved := nodes[d], 0.0
		for budget > 1e-9 {
			u := pick()
			if u < 0 {
				break
			}
			k := math.Min(budget, sizes[u]-n.got[u])
			n.got[u] += k
			budget -= k
			moved += k
			if sizes[u]-n.got[u] <= 1e-6 {
				n.done[u/64] |= 1 << (u % 64)
				n.left--
				holders[u]++
			}
		}
		return moved
	}
	var r result
	contended := make([]bool, all) // last step: a node with no slot found this one's slots all held
	for t := 0.0; ; t += dt {
		cold := 0
		for _, n := range nodes[p.Warm:] {
			if n.left > 0 {
				cold++
			}
		}
		if cold == 0 {
			r.AllWarm = t
			return r
		}
		if t > 30*24*3600 {
			r.AllWarm = math.Inf(1)
			return r
		}
		// Slots: drop the ones with nothing left to give (and, with OneSlot, a second one at a node
		// a slotless node waits for), then take free ones at the least busy useful nodes, the
		// slotless first.
		for d := p.Warm; d < all; d++ {
			n := nodes[d]
			keep := n.conns[:0]
			for i, s := range n.conns {
				yield := pol.OneSlot && contended[s] && len(keep)+len(n.conns)-i > 1
				if n.left > 0 && useful(d, s) && !yield {
					keep = append(keep, s)
				} else {
					active[s]--
				}
			}
			n.conns = keep
		}
		acquire := func(d, upto int) {
			n := nodes[d]
			for len(n.conns) < upto {
				best := -1
				for s := range nodes {
					if (pol.Slots == 0 || active[s] < pol.Slots) && !contains(n.conns, s) && useful(d, s) &&
						!(pol.OneSlot && contended[s] && len(n.conns) > 0) && (best < 0 || active[s] < active[best]) {
						best = s
					}
				}
				if best < 0 {
					return
				}
				active[best]++
				n.conns = append(n.conns, best)
			}
		}
		for d := p.Warm; d < all; d++ {
			if n := nodes[d]; n.left > 0 && (!pol.OneSlot || len(n.conns) == 0) {
				acquire(d, p.K)
			}
		}
		if pol.OneSlot {
			for d := p.Warm; d < all; d++ {
				if nodes[d].left > 0 {
					acquire(d, p.K)
				}
			}
		}
		// The origin's one reader: the first joining node that lacks a unit nobody holds, or has no slot.
		seed := -1
		for d := p.Warm; d < all && seed < 0; d++ {
			if n := nodes[d]; n.left > 0 && ((len(n.conns) == 0 && !pol.RareOnly) || rarest(d, nil, true) >= 0) {
				seed = d
			}
		}
		clear(contended)
		for d := p.Warm; d < all; d++ {
			if n := nodes[d]; n.left > 0 && len(n.conns) == 0 && d != seed {
				for s := range nodes {
					if pol.Slots > 0 && active[s] >= pol.Slots && useful(d, s) {
						contended[s] = true
					}
				}
			}
		}
		// Transfers: each slot gets an equal share of its server's cap, the seed the origin's, and a
		// node at its own rate scales them all down.
		type flow struct {
			d      int
			from   []float64 // per conn
			origin float64
		}
		flows := make([]flow, 0, cold)
		for d := p.Warm; d < all; d++ {
			n := nodes[d]
			if n.left == 0 {
				continue
			}
			f := flow{d: d, from: make([]float64, len(n.conns))}
			sum := 0.0
			for i, s := range n.conns {
				f.from[i] = p.UploadCap / float64(active[s])
				sum += f.from[i]
			}
			if d == seed {
				f.origin = p.OriginCap
				sum += f.origin
			}
			if sum > p.NodeRate {
				for i := range f.from {
					f.from[i] *= p.NodeRate / sum
				}
				f.origin *= p.NodeRate / sum
			}
			flows = append(flows, f)
		}
		for _, f := range flows {
			for i, s := range nodes[f.d].conns {
				from := nodes[s]
				take(f.d, f.from[i]*dt, func() int { return rarest(f.d, from, false) })
			}
			if f.origin > 0 {
				r.OriginBytes += take(f.d, f.origin*dt, func() int {
					if u := rarest(f.d, nil, true); u >= 0 {
						return u
					}
					if len(nodes[f.d].conns) > 0 || pol.RareOnly {
						return -1 // only units nobody serves come from the origin while it holds slots
					}
					return rarest(f.d, nil, false)
				})
			}
		}
	}
}

// units splits a model of total bytes into n equal units.
func units(total float64, n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = total / float64(n)
	}
	return s
}
