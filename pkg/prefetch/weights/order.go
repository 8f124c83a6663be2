package weights

import (
	"math/rand/v2"
	"slices"
	"sync"
)

// picker hands a download's chunk tasks to its workers. Without holders (an origin, a file source)
// it keeps the listing's order. With holders (the peer source, prefetch.Holders, asked for each
// file's next chunk) it finishes the files already started first while some node holds their next
// chunk, since a file (or a part) is served to other nodes only once all of it is here and verified;
// then it starts the file whose next chunk the fewest other nodes hold, at least one, ties at random
// (rarest first): the nodes of a wave then each take different files from the node ahead of them and
// trade them among themselves, instead of all asking that node for the same file at once. Chunks
// nobody holds yet come last, started files first, then in order (a seed reading the origin reads in
// order), so workers do not all wait on chunks no peer has while others' chunks are there to take.
type picker struct {
	holders func(t chunkTask) int

	mu      sync.Mutex
	order   []int               // files with tasks left, in listing order
	left    map[int][]chunkTask // per file, its tasks not yet taken, in offset order
	started map[int]bool        // files with a task taken and tasks left
}

func newPicker(tasks []chunkTask, holders func(t chunkTask) int) *picker {
	p := &picker{holders: holders, left: map[int][]chunkTask{}, started: map[int]bool{}}
	for _, t := range tasks {
		if _, ok := p.left[t.file]; !ok {
			p.order = append(p.order, t.file)
		}
		p.left[t.file] = append(p.left[t.file], t)
	}
	return p
}

// take returns the next task, or false when none is left.
func (p *picker) take() (chunkTask, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.order) == 0 {
		return chunkTask{}, false
	}
	file := p.order[0]
	if p.holders != nil {
		file = p.choose()
	}
	ts := p.left[file]
	t := ts[0]
	if len(ts) == 1 {
		delete(p.left, file)
		delete(p.started, file)
		for i, f := range p.order {
			if f == file {
				p.order = append(p.order[:i], p.order[i+1:]...)
				break
			}
		}
	} else {
		p.left[file] = ts[1:]
		p.started[file] = true
	}
	return t, true
}

// putBack returns a task taken but not done (no node could send it now: prefetch.ErrDeferred) to
// the front of its file's tasks, its file counted as started, so it is taken again as soon as a
// node holds it that can send.
func (p *picker) putBack(t chunkTask) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts, had := p.left[t.file]
	p.left[t.file] = append([]chunkTask{t}, ts...)
	p.started[t.file] = true
	if had {
		return
	}
	i := 0 // the file left the order when its last task was taken: back in listing order
	for i < len(p.order) && p.order[i] < t.file {
		i++
	}
	p.order = slices.Insert(p.order, i, t.file)
}

// choose is the file to take a task of (see picker); p.mu is held.
func (p *picker) choose() int {
	held := make(map[int]int, len(p.order))
	for _, f := range p.order {
		held[f] = p.holders(p.left[f][0])
		if p.started[f] && held[f] > 0 {
			return f
		}
	}
	best, fewest, ties := -1, 0, 0
	for _, f := range p.order {
		n := held[f]
		switch {
		case n <= 0:
			continue
		case fewest == 0 || n < fewest:
			best, fewest, ties = f, n, 1
		case n == fewest:
			ties++
			if rand.N(ties) == 0 { // each of the tied files equally likely
				best = f
			}
		}
	}
	if best >= 0 {
		return best
	}
	for _, f := range p.order { // nobody holds anything left: a started file before a new one
		if p.started[f] {
			return f
		}
	}
	return p.order[0]
}
