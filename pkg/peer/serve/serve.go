// Package serve is the read-only peer server: a warm node hands the weight files it verified and
// published to other warmd pods, with ranged GETs, so a node group scaling out reads most bytes from its
// warm peers instead of the origin. It serves only what the weights part reports verified and
// published (never staging), only to callers the auth package lets through, and never faster in
// total than the upload cap, so serving does not starve the node's own pods of disk or network, and
// to a few downloaders at a time (slots.go), so those finish soon and serve in turn.
package serve

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/hfcache"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/auth"
)

// Checker decides whether a bearer token may read (auth.Reviewer in the daemon).
type Checker interface {
	Check(ctx context.Context, token string) (auth.Verdict, string, error)
}

var _ Checker = (*auth.Reviewer)(nil)

// Refusal reasons, the values of warmd_peer_refused_requests_total's reason label.
const (
	ReasonUnauthenticated = "unauthenticated"
	ReasonForbidden       = "forbidden"
	ReasonBadRequest      = "bad_request"
	ReasonNotFound        = "not_found"
	ReasonReviewError     = "review_error"
)

// Options configure a Handler.
type Options struct {
	// Auth checks every request's bearer token.
	Auth Checker
	// Root is the weights cache root (HF_HUB_CACHE) the weights engine publishes into.
	Root *fsroot.Root
	// Published reports whether model at revision is verified and published now (the weights part's
	// state).
	Published func(model, revision string) bool
	// Staged returns the verified files of model at revision that a download in flight holds in
	// staging (name → path under Root; prefetch.StagedIn): served before the revision is published.
	// nil: only published revisions are served. Anything neither reports is 404, whatever is on disk.
	Staged func(model, revision string) map[string]string
	// Pieces returns the partly verified files of a download in flight (prefetch.PiecesIn): a range
	// inside their verified parts is served, nothing else of them. nil: none.
	Pieces func(model, revision string) map[string]Pieces
	// Bundles is the kept compile-cache bundle dir (cache.KeptDir); nil: no bundle is served.
	Bundles *fsroot.Root
	// ImageLayers opens the layer blobs of the images the node pulled and pinned (imageblobs.go);
	// nil: no layer is served.
	ImageLayers LayerOpener
	// UploadLimit caps the bytes per second served to all peers together; <= 0: no cap.
	UploadLimit int64
	// ServeSlots bounds the downloaders (nodes) served at once (see slots; more are taken while they
	// leave UploadLimit under-used); <= 0: no limit.
	ServeSlots int
	// SlotIdle is how long a downloader keeps its slot after its last request. Default DefaultSlotIdle.
	SlotIdle time.Duration
	// WriteStall ends a response whose next piece could not be sent for this long (a client that
	// stops reading, or reads a trickle): its connection is closed and its slot freed, so slow
	// clients cannot hold the slots. Default DefaultWriteStall.
	WriteStall time.Duration
	// Metrics counts served bytes and refusals; nil: counted nowhere.
	Metrics *metrics.Peers
	Log     *slog.Logger
}

// Handler serves GET and HEAD of peer.WeightsPath and peer.WeightFilesPath (staged.go), of peer.BundlePath (bundles.go) and of
// peer.ImageBlobPath and peer.ImageIndexPath (imageblobs.go).
type Handler struct {
	opts    Options
	limiter *rate.Limiter // shared by every response: the cap is per node, not per request
	piece   int
	// againWait bounds how long, in all, the pieces of a copy that is not its file's first wait for
	// the cap the first copies leave (capped.leftover): the constant againWait, shorter in tests.
	againWait time.Duration
	slots     *slots
	spread    *spread
}

var _ http.Handler = (*Handler)(nil)

// DefaultWriteStall: a warm peer's downloader reads as fast as its disk writes; one that takes 10 s
// to accept 256 KiB (the largest piece) is gone or hostile.
const DefaultWriteStall = 10 * time.Second

// New returns a Handler.
func New(opts Options) *Handler {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.WriteStall <= 0 {
		opts.WriteStall = DefaultWriteStall
	}
	h := &Handler{opts: opts, piece: 256 << 10, againWait: againWait, slots: newSlots(opts.ServeSlots, opts.SlotIdle, opts.UploadLimit)}
	h.slots.log = opts.Log
	h.spread = newSpread()
	if opts.UploadLimit > 0 {
		// The burst is one write piece: a response never runs ahead of the cap by more than 256 KiB.
		h.piece = int(min(int64(h.piece), max(opts.UploadLimit/8, 32<<10)))
		h.limiter = rate.NewLimiter(rate.Limit(opts.UploadLimit), h.piece)
	}
	return h
}

func (h *Handler) refuse(w http.ResponseWriter, code int, reason, msg string) {
	if h.opts.Metrics != nil {
		h.opts.Metrics.Refused.WithLabelValues(reason).Inc()
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="warmd-peer"`)
	}
	http.Error(w, msg, code)
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	digest, isBundle := strings.CutPrefix(r.URL.Path, peer.BundlePath)
	layer, isLayer := strings.CutPrefix(r.URL.Path, peer.ImageBlobPath)
	layerIndex, isIndex := strings.CutPrefix(r.URL.Path, peer.ImageIndexPath)
	isFiles := r.URL.Path == peer.WeightFilesPath
	if r.URL.Path != peer.WeightsPath && !isFiles && !isBundle && !isLayer && !isIndex {
		h.refuse(w, http.StatusNotFound, ReasonNotFound, "not found")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.refuse(w, http.StatusMethodNotAllowed, ReasonBadRequest, "read-only: GET or HEAD")
		return
	}
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	v, why, err := h.opts.Auth.Check(r.Context(), strings.TrimSpace(token))
	switch {
	case err != nil:
		h.opts.Log.Warn("peer request: token review failed", "remote", r.RemoteAddr, "err", err)
		h.refuse(w, http.StatusServiceUnavailable, ReasonReviewError, "token review unavailable")
		return
	case v == auth.Unauthenticated:
		h.opts.Log.Debug("peer request refused", "remote", r.RemoteAddr, "why", why)
		h.refuse(w, http.StatusUnauthorized, ReasonUnauthenticated, why)
		return
	case v != auth.OK:
		h.opts.Log.Info("peer request forbidden", "remote", r.RemoteAddr, "why", why)
		h.refuse(w, http.StatusForbidden, ReasonForbidden, why)
		return
	}
	if isBundle {
		h.serveBundle(w, r, digest)
		return
	}
	if isLayer {
		h.serveImageBlob(w, r, layer, false)
		return
	}
	if isIndex {
		h.serveImageBlob(w, r, layerIndex, true)
		return
	}
	q := r.URL.Query()
	name, rev, file := q.Get("model"), q.Get("revision"), q.Get("file")
	if err := model.ValidateName(name); err != nil {
		h.refuse(w, http.StatusBadRequest, ReasonBadRequest, "model: "+err.Error())
		return
	}
	if err := model.ValidateRevision(rev); err != nil {
		h.refuse(w, http.StatusBadRequest, ReasonBadRequest, "revision: "+err.Error())
		return
	}
	if isFiles {
		h.serveFiles(w, name, rev)
		return
	}
	fp, err := fsroot.ParsePath(file)
	if err != nil || fp.IsRoot() {
		h.refuse(w, http.StatusBadRequest, ReasonBadRequest, "file: not a safe relative name")
		return
	}
	fh, size, inFlight, err := h.openWeight(name, rev, fp)
	if err != nil && !h.opts.Published(name, rev) {
		if pfh, psize, perr := h.openPieces(name, rev, fp, r); perr == nil {
			fh, size, inFlight, err = pfh, psize, true, nil
		} else if !errors.Is(perr, errNoPieces) {
			err = perr
		}
	}
	if err != nil {
		h.refuse(w, http.StatusNotFound, ReasonNotFound, err.Error())
		return
	}
	defer fh.Close()
	// First copies first, one downloader at a time per file (spread.go).
	h.send(w, r, fh, size, true, &spreadFile{key: name + "\x00" + rev + "\x00" + fp.String(), inFlight: inFlight})
}

// openWeight opens file fp of model at revision rev: from the published snapshot, or, while the
// revision is still downloading here, from staging once that file is verified (staged.go), and
// then reports it in flight. Its error is the text of the 404.
func (h *Handler) openWeight(name, rev string, fp fsroot.Path) (*os.File, int64, bool, error) {
	if !h.opts.Published(name, rev) {
		fh, size, err := h.openStaged(name, rev, fp)
		if err == nil || !h.opts.Published(name, rev) { // published meanwhile: its snapshot has the file now
			return fh, size, err == nil, err
		}
	}
	snap, err := hfcache.SnapshotDir(name, rev)
	if err != nil {
		return nil, 0, false, err
	}
	blob, err := hfcache.Blob(h.opts.Root, snap, fp)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			h.opts.Log.Warn("peer request: published file unusable", "model", name, "file", fp.String(), "err", err)
		}
		return nil, 0, false, errors.New("no such published file")
	}
	fh, err := h.opts.Root.Open(blob.Path)
	if err != nil {
		return nil, 0, false, errors.New("no such published file")
	}
	return fh, blob.Size, false, nil
}

// spreadFile names a weight file for the spread rule (spread.go): key is its model, revision and
// name; inFlight says it is a file of a download still in flight here.
type spreadFile struct {
	key      string
	inFlight bool
}

// send answers r with the file fh of size bytes: its ranges bounded (limitRanges), a serving slot
// taken for a GET when slot is set (a HEAD sends no body: it takes none) and then, for a weight
// file (sp set), the file's copy (spread.go), the size in peer.HeaderSize, and the body through the
// upload cap.
func (h *Handler) send(w http.ResponseWriter, r *http.Request, fh *os.File, size int64, slot bool, sp *spreadFile) {
	if !h.limitRanges(w, r, size) {
		return
	}
	cw := &capped{ResponseWriter: w, h: h, ctx: r.Context(), rc: http.NewResponseController(w)}
	if slot && r.Method == http.MethodGet {
		who := downloader(r)
		// The file's copy is asked first: a downloader turned away for it takes no slot here.
		spare := sp != nil && h.spare(sp.inFlight)
		first := false
		if sp != nil {
			free, f := h.spread.free(sp.key, who, size, sp.inFlight)
			if !free && !spare {
				h.spreadBusy(w)
				return
			}
			// A first copy of a download in flight here, or one begun, takes no slot (spread.go).
			first = free && f
		}
		if !first {
			if reason := h.slots.admit(who, servingElsewhere(r)); reason != "" {
				h.busy(w, reason)
				return
			}
			defer h.slots.release(who)
		}
		if sp != nil {
			ok, again := h.spread.take(sp.key, who, spare)
			if !ok {
				h.spreadBusy(w)
				return
			}
			cw.again = again
			defer func() { h.spread.give(sp.key, who, cw.sent) }()
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(peer.HeaderSize, strconv.FormatInt(size, 10))
	// ServeContent answers Range (and HEAD) itself; the zero modtime keeps it from adding validators.
	http.ServeContent(cw, r, "", time.Time{}, fh)
}

// spare reports whether this node's upload has room for any copy (spread.go): the served rate is
// under ¾ of the cap. Without a cap nothing says: a file of a download in flight counts as sent
// from a used upload, a published one as from one with room (every slot holder gets it).
func (h *Handler) spare(inFlight bool) bool {
	if !h.slots.measured() {
		return !inFlight
	}
	return !h.slots.full()
}
