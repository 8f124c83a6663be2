package serve

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/peer"
)

// serveBundle answers GET and HEAD of peer.BundlePath + digest, for a caller already authenticated:
// the compile-cache bundle the node verified and kept under that digest (the cache part's kept dir),
// with Range support and the shared upload cap. The digest is then the only name looked up, so a
// temp file (".bundle.warmd-tmp-…") or anything but a regular file under the digest is never served
// (404). Bundles are small: they take no slot.
func (h *Handler) serveBundle(w http.ResponseWriter, r *http.Request, digest string) {
	var open func(context.Context, string) (*os.File, error)
	if h.opts.Bundles != nil {
		open = func(_ context.Context, sha string) (*os.File, error) {
			name := fsroot.MustPath(sha) // ValidDigest made it one safe element
			// Lstat first: only a regular file is opened (a FIFO would block the open).
			if fi, err := h.opts.Bundles.Lstat(name); err != nil || !fi.Mode().IsRegular() {
				return nil, fs.ErrNotExist
			}
			return h.opts.Bundles.Open(name)
		}
	}
	h.serveDigest(w, r, digest, "bundle", open, false)
}

// serveDigest answers GET and HEAD of a file named by a sha256 digest (a bundle, a layer, a
// layer's index): 400 unless the digest is exactly 64 lowercase hex digits, 404 when there is no
// store (open nil), when open finds nothing (fs.ErrNotExist; any other error is logged) or when it
// is not a regular file; else the file through send, with a slot for a GET when slot is set.
func (h *Handler) serveDigest(w http.ResponseWriter, r *http.Request, digest, what string, open func(context.Context, string) (*os.File, error), slot bool) {
	if !peer.ValidDigest(digest) {
		h.refuse(w, http.StatusBadRequest, ReasonBadRequest, what+" digest: not 64 lowercase hex digits")
		return
	}
	if open == nil {
		h.refuse(w, http.StatusNotFound, ReasonNotFound, "no "+what+" served here")
		return
	}
	fh, err := open(r.Context(), digest)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			h.opts.Log.Warn("peer request: "+what+" unusable", "digest", digest[:12], "err", err)
		}
		h.refuse(w, http.StatusNotFound, ReasonNotFound, what+" not held here")
		return
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		h.refuse(w, http.StatusNotFound, ReasonNotFound, what+" not held here")
		return
	}
	h.send(w, r, fh, fi.Size(), slot, nil)
}
