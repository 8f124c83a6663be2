// Weights: the seam for model weights (engine in weights/, sources in s3/ and file/). The State
// type and its queued/ready/failed values are shared with images (images.go).

package prefetch

import (
	"context"
	"errors"
	"io"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/state"
)

// Weights fetches one model's files, verifies them and publishes a snapshot; the engine in
// weights/ implements it, the daemon part and `warmd prefetch weights` call it.
type Weights interface {
	// Fetch downloads, verifies and publishes m, reporting progress as it goes. It returns the
	// published model's status (State Ready) or an error naming what went wrong and how to fix it.
	Fetch(ctx context.Context, m config.Model, progress func(ModelStatus)) (ModelStatus, error)
}

// Source holds one model's files: an S3 prefix, a local mirror dir. Names are relative to the
// model's root, with forward slashes, and are validated by the source before anyone sees them: a
// bucket's keys and a mirror's file names are outside input, and each becomes a path in the
// snapshot. A Source that holds something for the length of one fetch also implements FetchEnder.
type Source interface {
	// List returns every file of the model. A name that is not a safe relative path, or a listing
	// that cannot form one tree (a name listed twice, a file that is also a directory), is an error
	// naming the entry and the fix: the model must fail rather than publish part of itself.
	List(ctx context.Context) (Listing, error)
	// Head returns one file's metadata with its stored checksum, if the source keeps one.
	Head(ctx context.Context, name fsroot.Path) (objstore.Object, error)
	// Parts returns a multipart object's parts (nil if single-part or unknown).
	Parts(ctx context.Context, name fsroot.Path) ([]objstore.Part, error)
	// GetRange writes n bytes of name from off into w, in order.
	GetRange(ctx context.Context, name fsroot.Path, off, n int64, w io.Writer) (int64, error)
	// String names the source for logs and errors (s3://bucket/prefix/, file:///dir/).
	String() string
}

// FetchEnder is a Source that holds something for the length of one fetch (the peer source: the model
// revision's seed Lease); the engine calls EndFetch once when the fetch ends, with its error (nil: the
// model was published), so the source can let go in the way that outcome needs.
type FetchEnder interface {
	EndFetch(err error)
}

// Listing is what a Source lists for one model.
type Listing struct {
	// Files are the model's files in name order; each Object.Key is Name.String().
	Files []File
	// Skipped names entries the source left out and why (a file:// link leading out of the source
	// dir, dangling, or naming a directory), already quoted for display.
	Skipped []string
}

// File is one file of a model: its validated name (the path it gets in the snapshot) and the
// store's metadata.
type File struct {
	Name fsroot.Path
	objstore.Object
}

// Weights states beyond the shared queued, ready and failed: a model goes queued → downloading →
// verifying → ready (or failed), and leaves disk as evicted when the budget needs its room.
const (
	StateDownloading State = "downloading"
	StateVerifying   State = "verifying"
	StateEvicted     State = "evicted"
)

// ModelStatus is one model's weights status, as /v1/status and readiness see it. Readiness treats a
// model as warm only when State is Ready: that means every file of Revision was verified (see Files)
// and the snapshot at SnapshotPath is complete.
type ModelStatus struct {
	Model    string `json:"model"`
	Revision string `json:"revision"`
	Source   string `json:"source"`
	State    State  `json:"state"`
	// Reason says why the model failed (or was evicted), with the fix.
	Reason string `json:"reason,omitempty"`
	// BytesDone / BytesTotal count the model's bytes on disk in staging (resumed bytes included).
	BytesDone  int64 `json:"bytesDone"`
	BytesTotal int64 `json:"bytesTotal"`
	// BytesPerSecond is the recent download rate; ETASeconds the remaining time at that rate.
	BytesPerSecond float64 `json:"bytesPerSecond,omitempty"`
	ETASeconds     float64 `json:"etaSeconds,omitempty"`
	// SnapshotPath is the dir to pass to vLLM as --model (or use HF_HUB_CACHE=CacheRoot with
	// --model Model); set once Ready.
	SnapshotPath string `json:"snapshotPath,omitempty"`
	// CacheRoot is the Hugging Face cache root (HF_HUB_CACHE) holding the model.
	CacheRoot string `json:"cacheRoot,omitempty"`
	// Files records how each file was verified; set once Ready.
	Files []FileVerification `json:"files,omitempty"`
	// Skipped lists what the source left out and why (see Listing.Skipped), so a model that
	// published without a file says so.
	Skipped []string `json:"skipped,omitempty"`
	// Staged maps each verified file of a download in flight (name → its staging file, a path under
	// CacheRoot), which the peer server may serve before the model is published; nil once Ready. It
	// is the node's own business: not part of the status API.
	Staged map[string]string `json:"-"`
	// Pieces maps each file of a download in flight that is not verified whole yet but has parts
	// verified against the origin's part checksums (a multipart upload that kept them) to its
	// staging file and those parts' byte ranges: what the peer server may serve of it. Replaced,
	// never changed; nil once Ready. Like Staged, the node's own business.
	Pieces map[string]StagedPieces `json:"-"`
	// Servable counts what of a download in flight the peer server serves already (Staged and
	// Pieces, for `warmd status`); nil when nothing is, and once Ready.
	Servable *Servable `json:"servable,omitempty"`
	// From says where this download's bytes came from when peers are on (nil otherwise).
	From     *ByteSources `json:"from,omitempty"`
	Started  time.Time    `json:"started,omitzero"`
	Finished time.Time    `json:"finished,omitzero"`
}

// ByteSources splits a download's bytes between warm peers and the origin (peers.enabled).
type ByteSources struct {
	// PeerBytes and OriginBytes count bytes received from peers and from the origin in this download;
	// a peer's bytes leave PeerBytes when it proves corrupt (it is then in Dropped, not Peers).
	PeerBytes   int64 `json:"peerBytes"`
	OriginBytes int64 `json:"originBytes"`
	// Peers are the peers that delivered bytes (host:port); Dropped those dropped, with why.
	Peers   []string `json:"peers,omitempty"`
	Dropped []string `json:"dropped,omitempty"`
}

// MultiSource is implemented by a Source that reads from several places (the peer source), so the
// engine can report where a download's bytes came from.
type MultiSource interface {
	Source
	ByteSources() ByteSources
}

// Holders is implemented by a Source whose bytes can come from other nodes (the peer source): how
// many of them hold bytes [off, off+n) of the named file now (the file, or verified parts of it
// that cover the range) and can send them now (the peer source leaves out busy ones). A download
// then takes first the files whose next chunk fewest of them hold (rarest first, ties at random), so
// the nodes of a wave hold different files and trade them, instead of all asking the one node ahead
// of them for the same file.
type Holders interface {
	Holders(name string, off, n int64) int
}

// ErrDeferred is a Holders source's answer to a range it sent nothing of because no node that holds
// it can send it now (each is busy, or sends that file to another node): the download puts the chunk
// back and takes one another node can send, rather than a worker waiting on this one. A source
// answers it only under a context from Deferrable.
var ErrDeferred = errors.New("range deferred: the nodes that hold it cannot send it now")

type deferrableKey struct{}

// Deferrable marks ctx as a chunk download's that can put its chunk back (ErrDeferred).
func Deferrable(ctx context.Context) context.Context {
	return context.WithValue(ctx, deferrableKey{}, true)
}

// CanDefer reports whether ctx is Deferrable's: a source answers ErrDeferred only then.
func CanDefer(ctx context.Context) bool {
	v, _ := ctx.Value(deferrableKey{}).(bool)
	return v
}

// Verified reports whether the weights of model at revision are verified and published.
func (s ModelStatus) Verified(model, revision string) bool {
	return s.State == StateReady && s.Model == model && s.Revision == revision && s.SnapshotPath != ""
}

// Verification methods, strongest first.
const (
	VerifiedChecksum  = "s3-checksum"     // the store's full-object checksum (CRC32C, CRC64NVME, SHA256, …)
	VerifiedComposite = "s3-composite"    // a multipart object's checksum of part checksums, part by part
	VerifiedManifest  = "sha256-manifest" // the model's sha256sum manifest
	VerifiedETag      = "etag-md5"        // a single-part upload's ETag (the MD5 of the bytes)
	VerifiedSize      = "size"            // the store offered nothing stronger
)

// FileVerification records how one file was verified.
type FileVerification struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	Method string `json:"method"`
	// Digest is what was compared: "<algorithm>:<value>".
	Digest string `json:"digest,omitempty"`
	// Streamed: the digest was computed from the bytes as they arrived (chunk CRCs combined), not
	// by reading the file back.
	Streamed bool `json:"streamed,omitempty"`
}

// PublishedIn returns whether, in store's weights section now, model at revision is verified and
// published: the question the peer server asks before it serves a file of it.
func PublishedIn(store *state.Store) func(model, revision string) bool {
	return func(model, revision string) bool {
		if store == nil {
			return false
		}
		ws, ok := WeightsSection.Get(store)
		if !ok {
			return false
		}
		ms, ok := ws.Model(model)
		return ok && ms.Verified(model, revision)
	}
}

// StagedIn returns, from store's weights section now, the verified files of model at revision that a
// download in flight holds in staging (name → path under the cache root): what the peer server may
// serve of a revision not yet published. nil when none is in flight.
func StagedIn(store *state.Store) func(model, revision string) map[string]string {
	return func(model, revision string) map[string]string {
		ms, ok := inFlight(store, model, revision)
		if !ok {
			return nil
		}
		return ms.Staged
	}
}

// Servable is how much of a download in flight this node serves to its peers before it publishes:
// files verified whole, and files of which only some parts are verified, with those parts' bytes.
type Servable struct {
	Files     int   `json:"files"`
	PartFiles int   `json:"partFiles,omitempty"`
	PartBytes int64 `json:"partBytes,omitempty"`
}

// StagedPieces is a file of a download in flight some of whose parts are verified.
type StagedPieces struct {
	// Path is the staging file, a path under the cache root.
	Path string
	// Spans are the verified byte ranges, [start, end), sorted and disjoint (adjacent parts merged).
	Spans [][2]int64
}

// PiecesIn returns, from store's weights section now, the partly verified files of model at
// revision that a download in flight holds in staging (ModelStatus.Pieces): what the peer server may
// serve of them, range by range. nil when none is in flight.
func PiecesIn(store *state.Store) func(model, revision string) map[string]StagedPieces {
	return func(model, revision string) map[string]StagedPieces {
		ms, ok := inFlight(store, model, revision)
		if !ok {
			return nil
		}
		return ms.Pieces
	}
}

// inFlight returns model's status in store when its download of revision is in flight.
func inFlight(store *state.Store, model, revision string) (ModelStatus, bool) {
	if store == nil {
		return ModelStatus{}, false
	}
	ws, ok := WeightsSection.Get(store)
	if !ok {
		return ModelStatus{}, false
	}
	ms, ok := ws.Model(model)
	if !ok || ms.Revision != revision || (ms.State != StateDownloading && ms.State != StateVerifying) {
		return ModelStatus{}, false
	}
	return ms, true
}

// WeightsSection is the weights part's section of the node state.
var WeightsSection = state.NewKey[WeightsStatus]("weights")

// WeightsStatus is the weights part's section of the node state (WeightsSection).
type WeightsStatus struct {
	CacheRoot   string        `json:"cacheRoot"`
	BudgetBytes int64         `json:"budgetBytes,omitempty"`
	UsedBytes   int64         `json:"usedBytes"`
	Models      []ModelStatus `json:"models"`
}

// Model returns the status of model name, if any.
func (w WeightsStatus) Model(name string) (ModelStatus, bool) {
	for _, m := range w.Models {
		if m.Model == name {
			return m, true
		}
	}
	return ModelStatus{}, false
}
