package serve

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"

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
		return nil, 0, errors.New("file not verified here yet")
	}
	p, err := fsroot.ParsePath(rel) // the engine's own text; checked all the same
	if err != nil {
		return nil, 0, errors.New("file not verified here yet")
	}
	fh, err := h.opts.Root.Open(p)
	if err != nil { // published (moved into blobs/) or cleaned meanwhile
		return nil, 0, errors.New("file not verified here yet")
	}
	fi, err := fh.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		fh.Close()
		return nil, 0, errors.New("file not verified here yet")
	}
	return fh, fi.Size(), nil
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
	if !body.Complete && len(body.Files) == 0 {
		h.refuse(w, http.StatusNotFound, ReasonNotFound, "no file of this model revision is verified here")
		return
	}
	if len(body.Files) > peer.MaxWeightFiles {
		body.Files = body.Files[:peer.MaxWeightFiles] // what a fetcher reads; the rest is served all the same
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}
