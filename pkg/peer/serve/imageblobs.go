package serve

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"

	"warmd.io/warmd/pkg/peer"
)

// LayerOpener opens, for serving, the layer blob with the given sha256 (64 lowercase hex digits,
// already checked) and the gzip checkpoint index kept for it, when the layer belongs to an image the
// node pulled and pinned; fs.ErrNotExist otherwise. The images part implements it over the image
// store it pulled into and its index store.
type LayerOpener interface {
	OpenBlob(ctx context.Context, sha string) (*os.File, error)
	OpenIndex(ctx context.Context, sha string) (*os.File, error)
}

// serveImageBlob answers GET and HEAD of peer.ImageBlobPath + digest, for a caller already
// authenticated: a layer blob of an image the node pulled and pinned (Options.ImageLayers), ranged,
// under the shared upload cap and, for a GET, one of the serving slots like a weight file.
// With index set it answers peer.ImageIndexPath: the layer's checkpoint index, small, without a
// slot.
func (h *Handler) serveImageBlob(w http.ResponseWriter, r *http.Request, digest string, index bool) {
	if !peer.ValidDigest(digest) {
		h.refuse(w, http.StatusBadRequest, ReasonBadRequest, "layer digest: not 64 lowercase hex digits")
		return
	}
	if h.opts.ImageLayers == nil {
		h.refuse(w, http.StatusNotFound, ReasonNotFound, "no image layers served here")
		return
	}
	open := h.opts.ImageLayers.OpenBlob
	if index {
		open = h.opts.ImageLayers.OpenIndex
	}
	fh, err := open(r.Context(), digest)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			h.opts.Log.Warn("peer request: layer blob unusable", "layer", digest[:12], "err", err)
		}
		h.refuse(w, http.StatusNotFound, ReasonNotFound, "layer not held here")
		return
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		h.refuse(w, http.StatusNotFound, ReasonNotFound, "layer not held here")
		return
	}
	h.send(w, r, fh, fi.Size(), !index)
}
