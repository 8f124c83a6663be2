package serve

import (
	"errors"
	"io/fs"
	"net/http"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/peer"
)

// serveBundle answers GET and HEAD of peer.BundlePath + digest, for a caller already authenticated:
// the compile-cache bundle the node verified and kept under that digest (the cache part's kept dir), with Range
// support and the shared upload cap. The digest must be exactly 64 lowercase hex digits (400
// otherwise); it is then the only name looked up, so a temp file (".bundle.warmd-tmp-…") or anything
// but a regular file under the digest is never served (404).
func (h *Handler) serveBundle(w http.ResponseWriter, r *http.Request, digest string) {
	if !peer.ValidDigest(digest) {
		h.refuse(w, http.StatusBadRequest, ReasonBadRequest, "bundle digest: not 64 lowercase hex digits")
		return
	}
	if h.opts.Bundles == nil {
		h.refuse(w, http.StatusNotFound, ReasonNotFound, "no bundles kept here")
		return
	}
	name := fsroot.MustPath(digest) // ValidDigest made it one safe element
	// Lstat first: only a regular file is opened (a FIFO would block the open).
	if fi, err := h.opts.Bundles.Lstat(name); err != nil || !fi.Mode().IsRegular() {
		h.refuse(w, http.StatusNotFound, ReasonNotFound, "bundle not kept here")
		return
	}
	fh, err := h.opts.Bundles.Open(name)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			h.opts.Log.Warn("peer request: kept bundle unusable", "bundle", digest[:12], "err", err)
		}
		h.refuse(w, http.StatusNotFound, ReasonNotFound, "bundle not kept here")
		return
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		h.refuse(w, http.StatusNotFound, ReasonNotFound, "bundle not kept here")
		return
	}
	h.send(w, r, fh, fi.Size(), false) // bundles are small: no slot
}
