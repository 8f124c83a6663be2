// Command fleetsim estimates, for a fleet too large to run here, what warmd's peer distribution does
// to a scale-out: how many bytes leave the origin and how long until every new node is warm, with
// and without peers. It is a fluid model driven by rates measured on real runs (make bench-weights for
// a node's fetch rate, make bench-fleet for a peer's serving rate); docs/fleet.md prints its table.
//
// The model follows what warmd implements (pkg/peer): a node serves a model once it is warm (its files
// verified and published), to at most Slots downloaders at once (peers.serveSlots), each peer's upload
// cap shared equally among them; a cold node holds slots at up to K warm peers (peers.maxPeers) for its
// whole fetch; one that holds none reads the origin only through the gate (the seed rule, one node at
// a time) and otherwise waits for a slot, and moves to peers as slots free up; with Refresh it also
// finds peers that became warm after it started. The origin's egress cap is shared equally among
// the nodes on it. A node that finishes becomes a peer.
// units.go models what issue 28 adds: serving each file (file-level) or each multipart part
// (piece-level, Dragonfly's way) the moment it is verified, joining nodes included; -table prints
// those beside whole-revision serving and the piece-sharing bound.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
)

// params are one scenario's inputs; rates are bytes per second.
type params struct {
	Fleet, ScaleOut, Warm int     // nodes in the fleet, nodes joining at once, nodes already warm
	Model                 float64 // model bytes
	NodeRate              float64 // one node's fetch rate when nothing else limits it (disk, NIC)
	OriginCap             float64 // the origin's total egress
	UploadCap             float64 // one peer's serving cap
	K                     int     // peers one cold node draws from at most
}

// result is what a scenario costs.
type result struct {
	OriginBytes float64 // bytes served by the origin
	AllWarm     float64 // seconds until the last joining node is warm
}

// policy is how joining nodes use peers and the origin.
type policy struct {
	Peers bool // false: every node fetches from the origin
	// Slots is how many downloaders one peer serves at once (0: all that ask, sharing its cap; warmd:
	// peers.serveSlots, default 2). A peer that serves few at a time lets them finish and serve in
	// turn, so warm nodes double per wave; the nodes it turns away wait or read the origin (BusyOrigin).
	Slots int
	// Gate is how many nodes without a slot fetch from the origin at once (with BusyOrigin, only
	// while no node is warm; 0: all of them); warmd's is 1, the seed rule (peers.seedWait): one node
	// reads the origin, the others wait.
	Gate int
	// Refresh lets a fetch add peers that became warm after it started (warmd: every 5s); without it
	// a fetch knows only the peers warm at its first chunk.
	Refresh bool
	// BusyOrigin sends a node that every peer turned away to the origin at once; false (warmd) holds
	// it to the gate too (the seed rule: the first by name of the nodes still wanting the model reads
	// the origin), so the others wait for a slot. The model lets a node without a slot pass the gate;
	// warmd's seed may be holding a slot, and then no node reads the origin.
	BusyOrigin bool
}

// node is one joining node's fetch.
type node struct {
	left     float64 // bytes still needed
	peers    []int   // the peers whose slots it holds
	known    []int   // the warm peers it knows (without Refresh, those of its first look)
	onOrigin bool
	started  bool // it has looked its peers up and begun (without Refresh, it never looks again)
}

// simulate runs the fluid model in steps of dt seconds.
func simulate(p params, pol policy) result {
	const dt = 0.25
	nodes := make([]*node, p.ScaleOut)
	for i := range nodes {
		nodes[i] = &node{left: p.Model}
	}
	active := make([]int, p.Warm) // per peer: slots in use; warm nodes are peers 0..Warm-1
	var r result
	for t := 0.0; ; t += dt {
		cold, origin := 0, 0
		for _, n := range nodes {
			if n.left > 0 {
				cold++
				if n.onOrigin {
					origin++
				}
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
		// Nodes look their peers up (once, or always with Refresh) and take free slots at the least
		// busy ones they know; one that holds a slot reads only peers.
		for _, n := range nodes {
			if n.left <= 0 || !pol.Peers {
				continue
			}
			if !n.started || pol.Refresh {
				n.known = n.known[:0]
				for j := range active {
					n.known = append(n.known, j)
				}
			}
			for len(n.peers) < p.K {
				best := -1
				for _, j := range n.known {
					a := active[j]
					if (pol.Slots == 0 || a < pol.Slots) && !contains(n.peers, j) && (best < 0 || a < active[best]) {
						best = j
					}
				}
				if best < 0 {
					break
				}
				active[best]++
				n.peers = append(n.peers, best)
			}
			if len(n.peers) > 0 {
				n.started = true
				if n.onOrigin {
					n.onOrigin = false
					origin--
				}
			}
		}
		// A node without a slot reads the origin: at once when it knows busy peers (BusyOrigin),
		// else through the gate (the seed wait).
		for _, n := range nodes {
			if n.left <= 0 || n.onOrigin || len(n.peers) > 0 {
				continue
			}
			if !pol.Peers || (len(n.known) > 0 && pol.BusyOrigin) || pol.Gate == 0 || origin < pol.Gate {
				n.onOrigin, n.started = true, true
				origin++
			}
		}
		var done []*node
		for _, n := range nodes {
			if n.left <= 0 {
				continue
			}
			var fromPeers, fromOrigin float64
			for _, j := range n.peers {
				fromPeers += p.UploadCap / float64(active[j])
			}
			if n.onOrigin {
				fromOrigin = p.OriginCap / float64(origin)
			}
			rate := math.Min(p.NodeRate, fromPeers+fromOrigin)
			got := math.Min(n.left, rate*dt)
			if fromPeers+fromOrigin > 0 {
				r.OriginBytes += got * fromOrigin / (fromPeers + fromOrigin)
			}
			n.left -= got
			if n.left <= 0 {
				done = append(done, n)
			}
		}
		for _, n := range done { // a finished node frees its slots and serves from now on
			for _, j := range n.peers {
				active[j]--
			}
			n.peers, n.onOrigin = nil, false
			active = append(active, 0)
		}
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// ideal is Dragonfly-style piece sharing at its best: the origin sends each byte once (none when a
// node is warm already) and every node
// that takes part (warm or joining; the rest of the fleet holds nothing to send) uploads at its cap
// from the first second, so the scale-out finishes when the slower of the origin feeding one copy and
// the swarm's upload (its nodes' caps and the origin) covering every copy allows. It is a bound, not a
// design: no joining node can send what it has not received yet.
func ideal(p params) result {
	need := float64(p.ScaleOut) * p.Model
	up := float64(p.Warm+p.ScaleOut)*p.UploadCap + p.OriginCap
	first, origin := p.Model/math.Min(p.NodeRate, p.OriginCap), p.Model
	if p.Warm > 0 { // the warm nodes feed the swarm; the origin need not send a byte
		first, origin = p.Model/p.NodeRate, 0
	}
	return result{OriginBytes: origin, AllWarm: math.Max(first, need/math.Min(up, float64(p.ScaleOut)*p.NodeRate))}
}

func main() {
	var p params
	var pol policy
	var modelGiB, nodeGBs, originGBs, uploadGBs float64
	flag.IntVar(&p.Fleet, "fleet", 1000, "nodes in the fleet")
	flag.IntVar(&p.ScaleOut, "scale-out", 100, "nodes joining at once")
	flag.IntVar(&p.Warm, "warm", 8, "nodes already warm with the model when the scale-out starts (0: a new model)")
	flag.IntVar(&p.K, "k", 4, "peers one cold node draws from at most (peers.maxPeers)")
	flag.IntVar(&pol.Slots, "slots", 2, "downloaders one peer serves at once (peers.serveSlots, default 2; 0: every one that asks)")
	flag.IntVar(&pol.Gate, "gate", 1, "nodes fetching from the origin at once while no peer has the model (0: no limit; warmd's seed wait: 1)")
	flag.BoolVar(&pol.BusyOrigin, "busy-origin", false, "a node every peer turns away reads the origin at once (warmd: no, only the seed does; the others wait for a slot)")
	flag.BoolVar(&pol.Refresh, "refresh", true, "a fetch adds peers that became warm after it started (warmd: yes, every 5s)")
	flag.Float64Var(&modelGiB, "model-gib", 140, "model size in GiB (140: a 70B model in bf16)")
	flag.Float64Var(&nodeGBs, "node-gbs", 2.0, "one node's fetch rate in GB/s (measured: make bench-weights)")
	flag.Float64Var(&originGBs, "origin-gbs", 1.25, "the origin's egress cap in GB/s (10 Gb/s)")
	flag.Float64Var(&uploadGBs, "upload-gbs", 0.268, "one peer's upload cap in GB/s (peers.uploadLimit, default 256Mi/s)")
	table := flag.Bool("table", false, "print docs/fleet.md's tables: the scenarios it discusses, then the sharing levels")
	var lo levelsOpts
	flag.IntVar(&lo.Files, "files", 30, "files of the model for file-level sharing (30: a 70B checkpoint's safetensors shards)")
	flag.Float64Var(&lo.PieceMiB, "piece-mib", 64, "multipart part size in MiB for piece-level sharing (each part verified by its checksum)")
	flag.BoolVar(&lo.pol.OneSlot, "one-slot", false, "one slot per downloader while others wait (peers.oneSlotWhileWaiting); the sharing-levels table only")
	flag.Parse()
	p.Model = modelGiB * (1 << 30)
	p.NodeRate, p.OriginCap, p.UploadCap = nodeGBs*1e9, originGBs*1e9, uploadGBs*1e9
	if p.ScaleOut < 1 || p.Fleet < p.ScaleOut+p.Warm || p.K < 1 || pol.Slots < 0 || pol.Gate < 0 || lo.Files < 1 || lo.PieceMiB <= 0 ||
		p.Model <= 0 || p.NodeRate <= 0 || p.OriginCap <= 0 || p.UploadCap <= 0 {
		fmt.Fprintln(os.Stderr, "fleetsim: need scale-out ≥ 1, fleet ≥ scale-out + warm, k ≥ 1, slots and gate ≥ 0, files ≥ 1, positive sizes and rates")
		os.Exit(2)
	}
	pol.Peers = true
	fmt.Printf("model %.0f GiB, node %.2f GB/s, origin %.2f GB/s, peer upload %.3f GB/s, K %d, slots %d, gate %d, refresh %v, busy-origin %v\n\n",
		modelGiB, nodeGBs, originGBs, uploadGBs, p.K, pol.Slots, pol.Gate, pol.Refresh, pol.BusyOrigin)
	fmt.Println("| scenario | origin bytes, no peers | origin bytes, peers | origin bytes ÷ model | all warm, no peers | all warm, peers | speedup | piece-sharing bound (origin, all warm) |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	if !*table {
		row(fmt.Sprintf("%d join, %d warm", p.ScaleOut, p.Warm), p, pol)
		return
	}
	for _, s := range []struct {
		name string
		edit func(*params)
	}{
		{"100 join, 8 warm (scale-out of a served model)", func(*params) {}},
		{"100 join, 1 warm", func(q *params) { q.Warm = 1 }},
		{"100 join, 0 warm (a new model)", func(q *params) { q.Warm = 0 }},
		{"100 join, 8 warm, upload cap halved", func(q *params) { q.UploadCap /= 2 }},
		{"100 join, 8 warm, K = 1", func(q *params) { q.K = 1 }},
		{"100 join, 8 warm, origin ⅛ of a node (as bench-fleet)", func(q *params) { q.OriginCap = q.NodeRate / 8 }},
		{"500 join, 8 warm", func(q *params) { q.ScaleOut = 500 }},
	} {
		q := p
		s.edit(&q)
		row(s.name, q, pol)
	}
	fmt.Println()
	lo.pol.Slots = pol.Slots
	levelsTable(p, lo)
}

func row(name string, p params, pol policy) {
	without, with, id := simulate(p, policy{}), simulate(p, pol), ideal(p)
	fmt.Printf("| %s | %s | %s | %.2f | %s | %s | %.1f× | %s, %s |\n", name,
		gb(without.OriginBytes), gb(with.OriginBytes), with.OriginBytes/p.Model,
		dur(without.AllWarm), dur(with.AllWarm), without.AllWarm/with.AllWarm, gb(id.OriginBytes), dur(id.AllWarm))
}

func gb(b float64) string {
	if b >= 1e12 {
		return fmt.Sprintf("%.1f TB", b/1e12)
	}
	return fmt.Sprintf("%.0f GB", b/1e9)
}

func dur(s float64) string {
	if math.IsInf(s, 1) {
		return "never"
	}
	return fmt.Sprintf("%.0f min", math.Ceil(s/60))
}
