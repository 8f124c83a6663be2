package weights

import (
	"slices"
	"testing"
)

// TestPickerOrder: without holders the listing's order; with holders a started file's other chunks
// first, then the file fewest other nodes hold (at least one), and files nobody holds last, in order.
func TestPickerOrder(t *testing.T) {
	tasks := func() []chunkTask {
		var ts []chunkTask
		for f := range 4 {
			for c := range 2 {
				ts = append(ts, chunkTask{file: f, chunk: c})
			}
		}
		return ts
	}
	drain := func(p *picker) (files []int) {
		for tk, ok := p.take(); ok; tk, ok = p.take() {
			files = append(files, tk.file)
		}
		return files
	}
	if got, want := drain(newPicker(tasks(), nil)), []int{0, 0, 1, 1, 2, 2, 3, 3}; !slices.Equal(got, want) {
		t.Errorf("without holders: files %v, want the listing's order %v", got, want)
	}
	held := map[int]int{0: 0, 1: 3, 2: 1, 3: 2} // file 0 held by nobody yet
	if got, want := drain(newPicker(tasks(), func(t chunkTask) int { return held[t.file] })), []int{2, 2, 3, 3, 1, 1, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("with holders %v: files %v, want rarest first, a started file finished first, nobody's last: %v", held, got, want)
	}
	// Ties go either way, never to a file nobody holds.
	seen := map[int]bool{}
	for range 64 {
		p := newPicker(tasks(), func(t chunkTask) int { return map[int]int{0: 0, 1: 1, 2: 1, 3: 1}[t.file] })
		tk, _ := p.take()
		seen[tk.file] = true
	}
	if seen[0] || len(seen) != 3 {
		t.Errorf("first file taken over 64 tied pickers: %v; want each of 1, 2, 3 and never 0", seen)
	}
}

// TestPickerPutBack: a chunk given back (no node could send it now) is taken again before its
// file's later chunks, its file counts as started, and a file whose last chunk came back is in the
// order again.
func TestPickerPutBack(t *testing.T) {
	p := newPicker([]chunkTask{{file: 0, chunk: 0}, {file: 0, chunk: 1}, {file: 1, chunk: 0}}, nil)
	a, _ := p.take() // file 0 chunk 0
	b, _ := p.take() // file 0 chunk 1: file 0 leaves the order
	p.putBack(b)
	p.putBack(a)
	var got []chunkTask
	for tk, ok := p.take(); ok; tk, ok = p.take() {
		got = append(got, tk)
	}
	want := []chunkTask{{file: 0, chunk: 0}, {file: 0, chunk: 1}, {file: 1, chunk: 0}}
	if !slices.Equal(got, want) {
		t.Errorf("after giving back both chunks of file 0: took %v, want %v", got, want)
	}
	held := map[int]int{0: 1, 1: 1}
	p = newPicker([]chunkTask{{file: 0, chunk: 0}, {file: 1, chunk: 0}, {file: 1, chunk: 1}}, func(t chunkTask) int { return held[t.file] })
	first, _ := p.take()
	p.putBack(first)
	if again, _ := p.take(); again != first {
		t.Errorf("with holders, the chunk given back (%v) was not taken again first: %v", first, again)
	}
}
