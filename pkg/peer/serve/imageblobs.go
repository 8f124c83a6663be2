package serve

import (
	"context"
	"net/http"
	"os"
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
// under the shared upload cap and, for a GET, one of the serving slots like a weight file. With
// index set it answers peer.ImageIndexPath: the layer's checkpoint index, small, without a slot.
func (h *Handler) serveImageBlob(w http.ResponseWriter, r *http.Request, digest string, index bool) {
	var open func(context.Context, string) (*os.File, error)
	what := "layer"
	if index {
		what = "layer index"
	}
	if l := h.opts.ImageLayers; l != nil {
		open = l.OpenBlob
		if index {
			open = l.OpenIndex
		}
	}
	h.serveDigest(w, r, digest, what, open, !index)
}
