package serve

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/peer"
)

// A revision still downloading here is served file by file: each file the weights engine verified
// against the origin's identity is read from its staging file, so a node joining beside others is
// useful to them before its last shard lands (docs/fleet.md). Nothing unverified is ever served:
// the engine names a staged file only after it verified it, and drops the list when it publishes.

// openStaged opens verified file fp of a download in flight of model at revision rev.
func (h *Handler) openStaged(name, rev string, fp fsroot.Path) (*os.File, int64, error) {
	if h.opts.Staged == nil {
		return nil, 0, errors.New("model revision not published here")
	}
	rel, ok := h.opts.Staged(name, rev)[fp.String()]
	if !ok {
		return nil, 0, errNoPieces
	}
	return h.openStaging(rel)
}

// openStaging opens the staging file at rel (a path under Root the engine named); published (moved
// into blobs/), cleaned meanwhile, or not a regular file: not verified here.
func (h *Handler) openStaging(rel string) (*os.File, int64, error) {
	p, err := fsroot.ParsePath(rel) // the engine's own text; checked all the same
	if err != nil {
		return nil, 0, errNoPieces
	}
	fh, err := h.opts.Root.Open(p)
	if err != nil {
		return nil, 0, errNoPieces
	}
	fi, err := fh.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		fh.Close()
		return nil, 0, errNoPieces
	}
	return fh, fi.Size(), nil
}

// Pieces is a file of a download in flight some of whose parts are verified (prefetch.StagedPieces).
type Pieces struct {
	// Path is the staging file, a path under Root.
	Path string
	// Spans are the verified byte ranges, [start, end), sorted and disjoint.
	Spans [][2]int64
}

// errNoPieces: neither the file nor any part of it is verified here.
var errNoPieces = errors.New("file not verified here yet")

// openPieces opens file fp of a download in flight of model at revision rev when every range r asks
// for lies inside the file's verified parts; a request without a Range, or with one reaching past
// them, is refused (404): the rest of the file is not verified here yet.
func (h *Handler) openPieces(name, rev string, fp fsroot.Path, r *http.Request) (*os.File, int64, error) {
	if h.opts.Pieces == nil {
		return nil, 0, errNoPieces
	}
	pc, ok := h.opts.Pieces(name, rev)[fp.String()]
	if !ok {
		return nil, 0, errNoPieces
	}
	fh, size, err := h.openStaging(pc.Path)
	if err != nil {
		return nil, 0, err
	}
	if !insideSpans(r.Header.Get("Range"), size, pc.Spans) {
		fh.Close()
		return nil, 0, errors.New("the range asked for is not verified here yet")
	}
	return fh, size, nil
}

// insideSpans reports whether every range of a Range header lies inside one of spans ([start, end))
// of a file of size bytes; no header, or one that does not parse, does not.
func insideSpans(header string, size int64, spans [][2]int64) bool {
	spec, ok := strings.CutPrefix(header, "bytes=")
	if !ok {
		return false
	}
	specs := strings.Split(spec, ",")
	if len(specs) > maxSpecs {
		return false
	}
	for _, x := range specs {
		s, ok := parseSpan(strings.TrimSpace(x), size)
		if !ok || s.a > s.b {
			return false
		}
		if !peer.Covers(spans, s.a, s.b+1) {
			return false
		}
	}
	return true
}

// serveFiles answers which files of model at revision rev this node can serve now (peer.WeightFiles):
// the whole revision once published, the verified files of a download in flight, else 404.
func (h *Handler) serveFiles(w http.ResponseWriter, name, rev string) {
	var body peer.WeightFiles
	switch {
	case h.opts.Published(name, rev):
		body.Complete = true
	case h.opts.Staged != nil:
		for f := range h.opts.Staged(name, rev) {
			body.Files = append(body.Files, f)
		}
		slices.Sort(body.Files)
	}
	if h.opts.Pieces != nil && !body.Complete {
		for f, p := range h.opts.Pieces(name, rev) {
			if body.Pieces == nil {
				body.Pieces = map[string][][2]int64{}
			}
			body.Pieces[f] = p.Spans[:min(len(p.Spans), peer.MaxPieceSpans)]
		}
	}
	if !body.Complete && len(body.Files) == 0 && len(body.Pieces) == 0 {
		h.refuse(w, http.StatusNotFound, ReasonNotFound, "no file of this model revision is verified here")
		return
	}
	if len(body.Files) > peer.MaxWeightFiles {
		body.Files = body.Files[:peer.MaxWeightFiles] // what a fetcher reads; the rest is served all the same
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}
