package weights

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
)

// Parts are verified as they land, not only whole files (issue 28 item 2, docs/fleet.md). A file the
// origin stored as a multipart upload with part checksums (CRC32, CRC32C, CRC64NVME, SHA1, SHA256:
// S3's GetObjectAttributes, or HEAD ?partNumber=N) is checked part by part while its download runs:
// once every chunk that covers a part has landed, the part's bytes are checked against the origin's
// part checksum (the journaled chunk CRCs combined when the part starts and ends on chunk
// boundaries, else read back from staging). A part that matches is listed in ModelStatus.Pieces, so
// the peer server serves its bytes to the nodes beside this one before the file is whole; one that
// does not is fetched again at once, chunk by chunk, which the peer source answers from the origin
// and compares with what the peer sent (the peer is dropped as corrupt when they differ). Nothing
// unverified is served: a part is listed only after it matched, and bytes wait in staging, never
// under a final path, until the whole file is verified too. Files without part checksums stay
// file-level.

// Part states.
const (
	partPending uint8 = iota
	partChecking
	partVerified
	partFailed // still mismatched after the refetches: the file-level verification decides
)

// pieceSet is one file's parts and which of them are verified.
type pieceSet struct {
	alg   string
	parts []objstore.Part
	offs  []int64 // where each part starts
	mu    sync.Mutex
	state []uint8
}

// newPieceSet checks an origin's part list against the file's size and returns nil (file-level
// verification only) when it is not a usable list: no parts, too many, a part without a checksum,
// numbers out of order, or sizes that do not add up to the file's.
func newPieceSet(parts []objstore.Part, alg string, size int64) *pieceSet {
	if len(parts) < 2 || len(parts) > objstore.MaxParts {
		return nil
	}
	if _, err := objstore.NewHash(alg); err != nil {
		return nil
	}
	p := &pieceSet{alg: alg, parts: parts, offs: make([]int64, len(parts)), state: make([]uint8, len(parts))}
	var off int64
	for i, pt := range parts {
		if pt.Number != i+1 || pt.Size <= 0 || pt.Checksum == "" || strings.Contains(pt.Checksum, "-") {
			return nil
		}
		p.offs[i] = off
		off += pt.Size
	}
	if off != size {
		return nil
	}
	return p
}

// span returns part k's byte range [a, b).
func (p *pieceSet) span(k int) (a, b int64) { return p.offs[k], p.offs[k] + p.parts[k].Size }

// overlapping returns the parts [lo, hi) that share a byte with [off, off+n).
func (p *pieceSet) overlapping(off, n int64) (lo, hi int) {
	lo = sort.Search(len(p.offs), func(k int) bool { return p.offs[k]+p.parts[k].Size > off })
	hi = sort.Search(len(p.offs), func(k int) bool { return p.offs[k] >= off+n })
	return lo, hi
}

// claim moves part k from pending to checking, so one worker checks it.
func (p *pieceSet) claim(k int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state[k] != partPending {
		return false
	}
	p.state[k] = partChecking
	return true
}

func (p *pieceSet) set(k int, s uint8) {
	p.mu.Lock()
	p.state[k] = s
	p.mu.Unlock()
}

// verifiedSum returns part k's checksum, decoded, when the part was verified as it landed (its
// bytes matched it then): the composite check needs no read-back of it. nil without pieces, or
// when the part must be read back.
func (p *pieceSet) verifiedSum(k int) []byte {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	ok := k < len(p.state) && p.state[k] == partVerified
	p.mu.Unlock()
	if !ok {
		return nil
	}
	sum, err := base64.StdEncoding.DecodeString(p.parts[k].Checksum)
	if err != nil {
		return nil
	}
	return sum
}

// multipartETag reports whether an ETag is a multipart upload's ("<md5>-<parts>", parts ≥ 2).
func multipartETag(etag string) bool {
	_, n, ok := strings.Cut(etag, "-")
	k, err := strconv.Atoi(n)
	return ok && err == nil && k >= 2 && k <= objstore.MaxParts
}

// loadPieces asks the origin for file sf's parts when pieces can help (the source is one peers
// serve, and the file is a multipart upload with a checksum) and sets sf.pieces when the list is
// usable. A store that gives no parts costs only this: the file stays file-level.
func (f *fetch) loadPieces(ctx context.Context, i int, h objstore.Object) {
	sf := &f.files[i]
	if _, done := f.j.verifiedAs(i); done {
		return
	}
	if _, peers := f.src.(prefetch.Holders); !peers || h.Checksum.Value == "" || (!h.Checksum.Composite && !multipartETag(h.ETag)) {
		return
	}
	parts, err := f.src.Parts(ctx, sf.name)
	if err != nil {
		f.e.opts.Log.Debug("no part list; the file is verified whole", "model", f.m.Name, "file", sf.obj.Key, "err", err)
		return
	}
	sf.pieces = newPieceSet(parts, h.Checksum.Algorithm, sf.obj.Size)
}

// chunkAlg is the CRC each chunk of sf is summed with as it streams: the full-object CRC, else the
// part CRC; "" for none.
func (sf *stagedFile) chunkAlg() string {
	switch {
	case sf.streamAlg != "":
		return sf.streamAlg
	case sf.pieces != nil && objstore.Combinable(sf.pieces.alg):
		return sf.pieces.alg
	}
	return ""
}

// checkParts checks every part of t's file that t completed (all the chunks covering it landed).
// A part that mismatches is fetched again, up to VerifyAttempts times; the error is a fetch's.
func (f *fetch) checkParts(ctx context.Context, t chunkTask) error {
	p := f.files[t.file].pieces
	if p == nil {
		return nil
	}
	lo, hi := p.overlapping(t.off, t.n)
	for k := lo; k < hi; k++ {
		if !f.partLanded(t.file, k) || !p.claim(k) {
			continue
		}
		if err := f.checkPart(ctx, t.file, k, true); err != nil {
			return err
		}
	}
	return nil
}

// checkLandedParts checks the parts a resumed download finds landed already (no refetch: a
// mismatch there is the file-level verification's to find and fetch again).
func (f *fetch) checkLandedParts(ctx context.Context, only map[int]error) {
	for i, sf := range f.files {
		if _, in := only[i]; (only != nil && !in) || sf.pieces == nil {
			continue
		}
		if _, ok := f.j.verifiedAs(i); ok {
			continue
		}
		for k := range sf.pieces.parts {
			if ctx.Err() != nil {
				return
			}
			if f.partLanded(i, k) && sf.pieces.claim(k) {
				_ = f.checkPart(ctx, i, k, false)
			}
		}
	}
}

// partLanded reports whether every chunk covering part k of file i is journaled.
func (f *fetch) partLanded(i, k int) bool {
	cs := f.e.opts.ChunkSize
	a, b := f.files[i].pieces.span(k)
	for c := a / cs; c*cs < b; c++ {
		if !f.j.isDone(i, int(c)) {
			return false
		}
	}
	return true
}

// checkPart checks claimed part k of file i and lists it as served when it matches; with refetch a
// mismatched part's chunks are fetched again and it is checked again.
func (f *fetch) checkPart(ctx context.Context, i, k int, refetch bool) error {
	sf := f.files[i]
	p := sf.pieces
	a, b := p.span(k)
	for attempt := 0; ; attempt++ {
		err := f.partMatches(i, k)
		if err == nil {
			p.set(k, partVerified)
			f.addPiece(i, a, b)
			return nil
		}
		if ctx.Err() != nil {
			p.set(k, partFailed)
			return nil
		}
		if !errors.Is(err, errMismatch) || !refetch || attempt >= f.e.opts.VerifyAttempts {
			f.e.opts.Log.Warn("part not verified; the file is checked whole", "model", f.m.Name, "file", sf.obj.Key, "part", p.parts[k].Number, "err", err)
			p.set(k, partFailed)
			return nil
		}
		f.e.opts.Log.Warn("part failed verification; fetching it again", "model", f.m.Name, "file", sf.obj.Key,
			"part", p.parts[k].Number, "bytes", fmt.Sprintf("%d-%d", a, b-1), "from", f.src.String(), "err", err)
		cs := f.e.opts.ChunkSize
		for c := a / cs; c*cs < b; c++ {
			n := min(cs, sf.obj.Size-c*cs)
			f.done.Add(-n)
			if err := f.fetchChunk(ctx, chunkTask{file: i, chunk: int(c), off: c * cs, n: n}); err != nil {
				return err
			}
		}
	}
}

// partMatches compares part k of file i as staged with the origin's part checksum.
func (f *fetch) partMatches(i, k int) error {
	sf := f.files[i]
	p := sf.pieces
	a, b := p.span(k)
	got, ok := f.combinedPartSum(i, k)
	if !ok {
		var err error
		if got, err = hashFile(sf.fh, a, b-a, p.alg); err != nil {
			return err
		}
	}
	if objstore.Encode(got) != p.parts[k].Checksum {
		return fmt.Errorf("%w: part %d (bytes %d-%d) %s %s, the origin says %s", errMismatch, p.parts[k].Number, a, b-1, fsroot.Quote(p.alg), objstore.Encode(got), fsroot.Quote(p.parts[k].Checksum))
	}
	return nil
}

// combinedPartSum is part k's CRC from the journaled chunk CRCs, when the part starts and ends on
// chunk boundaries and its chunks were summed with the part's algorithm; ok is false otherwise.
func (f *fetch) combinedPartSum(i, k int) ([]byte, bool) {
	sf := f.files[i]
	p := sf.pieces
	cs := f.e.opts.ChunkSize
	a, b := p.span(k)
	if sf.chunkAlg() != p.alg || a%cs != 0 || (b%cs != 0 && b != sf.obj.Size) {
		return nil, false
	}
	return f.combinedSum(i, a, b, p.alg)
}

// addPiece lists bytes [a, b) of file i as verified (ModelStatus.Pieces) unless the whole file is
// staged already. The map and its span lists are replaced, never changed.
func (f *fetch) addPiece(i int, a, b int64) {
	sf := f.files[i]
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, whole := f.status.Staged[sf.obj.Key]; whole {
		return
	}
	pieces := maps.Clone(f.status.Pieces)
	if pieces == nil {
		pieces = map[string]prefetch.StagedPieces{}
	}
	cur := pieces[sf.obj.Key]
	pieces[sf.obj.Key] = prefetch.StagedPieces{Path: sf.data.String(), Spans: mergeSpan(cur.Spans, a, b)}
	f.status.Pieces = pieces
	f.countServableLocked()
}

// resetPieces forgets what was verified of file i's parts (the file failed verification and is
// fetched again): none of its bytes is served until its parts land and match again.
func (f *fetch) resetPieces(i int) {
	sf := f.files[i]
	if p := sf.pieces; p != nil {
		p.mu.Lock()
		clear(p.state)
		p.mu.Unlock()
	}
	f.mu.Lock()
	f.dropPiecesLocked(sf.obj.Key)
	f.mu.Unlock()
}

// dropPiecesLocked removes key from ModelStatus.Pieces (a new map; under f.mu).
func (f *fetch) dropPiecesLocked(key string) {
	if _, ok := f.status.Pieces[key]; ok {
		pieces := maps.Clone(f.status.Pieces)
		delete(pieces, key)
		f.status.Pieces = pieces
	}
	f.countServableLocked()
}

// countServableLocked sets ModelStatus.Servable from Staged and Pieces (a new value; under f.mu).
func (f *fetch) countServableLocked() {
	s := prefetch.Servable{Files: len(f.status.Staged), PartFiles: len(f.status.Pieces)}
	for _, p := range f.status.Pieces {
		for _, sp := range p.Spans {
			s.PartBytes += sp[1] - sp[0]
		}
	}
	f.status.Servable = nil
	if s.Files+s.PartFiles > 0 {
		f.status.Servable = &s
	}
}

// mergeSpan returns spans with [a, b) added, sorted, overlapping and adjacent spans merged (a new slice).
func mergeSpan(spans [][2]int64, a, b int64) [][2]int64 {
	out := append(slices.Clone(spans), [2]int64{a, b})
	slices.SortFunc(out, func(x, y [2]int64) int { return cmp.Compare(x[0], y[0]) })
	merged := out[:1]
	for _, s := range out[1:] {
		last := &merged[len(merged)-1]
		if s[0] <= last[1] {
			last[1] = max(last[1], s[1])
			continue
		}
		merged = append(merged, s)
	}
	return merged
}
