// Package prefetch owns the seams through which warmd makes a node warm before a pod needs it: Images
// (container images pulled, unpacked and pinned) here, Weights (model files) beside it. Each backend
// lives in a subpackage named after its technology (containerd/, embedded/ for images); the daemon part
// that decides what to pull and when lives in images/. This package holds only interfaces and the
// status values other parts (readiness, the status CLI) read; it does no I/O and decides nothing about
// warmth.
package prefetch

import (
	"context"
	"errors"
	"time"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"warmd.io/warmd/pkg/state"
)

// Label keys warmd puts on the images it manages. Pinned is the CRI plugin's own key: the kubelet's
// image GC skips images the CRI reports pinned, so a full disk does not silently drop the warm image.
const (
	LabelPinned  = "io.cri-containerd.pinned"
	PinnedValue  = "pinned"
	LabelManaged = "warmd.io/managed"
)

// OnRemove policies: what happens to an image warmd pinned once it leaves the config.
const (
	OnRemoveUnpin  = "unpin"
	OnRemoveKeep   = "keep"
	OnRemoveRemove = "remove"
)

// ErrNotFound is returned by Images.Lookup when the image is not present locally.
var ErrNotFound = errors.New("image not present")

// Images is one place images are kept warm: a containerd daemon (the kubelet's) or the embedded
// content store. The image manager drives it; implementations do one thing per call and keep no
// schedule of their own, so retries, deadlines and concurrency are decided in one place.
type Images interface {
	// Backend says which backend and API path serve the pulls, for status and logs.
	Backend() BackendInfo
	// Resolve asks the registry what ref points at now and walks the manifest for the node's
	// platform, so the caller knows the digest to record and the size to scale deadlines by.
	Resolve(ctx context.Context, ref string) (Resolved, error)
	// Pull fetches exactly r.Digest under the name r.Name, unpacks it for the node's platform and
	// labels it pinned and managed. progress is called from the pulling goroutine, often.
	Pull(ctx context.Context, r Resolved, progress func(Progress)) error
	// Lookup reports what is present locally under name; ErrNotFound when nothing is.
	Lookup(ctx context.Context, name string) (Local, error)
	// Managed lists every image carrying warmd's managed label.
	Managed(ctx context.Context) ([]Local, error)
	// Release applies an OnRemove policy to an image warmd manages; images without warmd's label are
	// left alone. "remove" deletes every ref that points at the image, including the CRI's aliases.
	Release(ctx context.Context, name, policy string) error
	// Close releases connections.
	Close() error
}

// BackendInfo names the active backend.
type BackendInfo struct {
	// Name is "containerd" or "embedded".
	Name string `json:"name"`
	// Path is the API path pulls take: "transfer" (containerd's daemon-side Transfer service),
	// "pull" (client-side Pull, for containerd 1.6 which lacks the streaming service) or "embedded".
	Path string `json:"path"`
	// Detail is a human line: version, socket or dir, snapshotter, platform.
	Detail string `json:"detail"`
}

// Resolved is what a registry said a reference points at, for the node's platform.
type Resolved struct {
	// Name is the normalized reference the image is stored under (docker.io/library/x:tag).
	Name string `json:"name"`
	// Target is the top-level descriptor (an index or a manifest); its digest is what is recorded warm.
	Target ocispec.Descriptor `json:"target"`
	// Manifest is the node platform's manifest (Target itself for a single-platform image).
	Manifest ocispec.Descriptor   `json:"manifest"`
	Config   ocispec.Descriptor   `json:"config"`
	Layers   []ocispec.Descriptor `json:"layers"`
	// ByDigest is true for name@sha256:… references, which never re-resolve.
	ByDigest bool `json:"byDigest"`
}

// Size is the bytes a pull fetches at most: layers, config and manifests.
func (r Resolved) Size() int64 {
	n := r.Config.Size + r.Manifest.Size
	if r.Target.Digest != r.Manifest.Digest {
		n += r.Target.Size
	}
	for _, l := range r.Layers {
		n += l.Size
	}
	return n
}

// Progress is a snapshot of one pull.
type Progress struct {
	// Phase is StatePulling or StateUnpacking.
	Phase State
	// Layers in manifest order.
	Layers []LayerProgress
}

// LayerProgress is one layer's download.
type LayerProgress struct {
	Digest digest.Digest
	Size   int64
	Done   int64
	// Complete is true once the layer is in the content store, verified.
	Complete bool
	// FetchSeconds is the time from the pull's start until the layer was complete.
	FetchSeconds float64
	// FromPeers is true when warm peers delivered the layer (the registry served the rest).
	FromPeers bool
	// Unpack says how the layer was unpacked, once it is (nil before, and for backends that do not
	// report layers one by one).
	Unpack *LayerUnpack
}

// LayerUnpack is how one layer was unpacked: what an operator needs to see where a pull's time went
// (the fetch, the decoder, serial or indexed) without reading the daemon's log.
type LayerUnpack struct {
	// By is "warmd" (warmd's own decoder and untar) or "daemon" (containerd's applier).
	By string `json:"by"`
	// Decoder is gzip-warmd, gzip-warmd-indexed, zstd or none for By warmd; empty for the daemon.
	Decoder string `json:"decoder,omitempty"`
	// Inflated is the layer's tar size, as warmd counted it (0 when the daemon unpacked).
	Inflated int64 `json:"inflated,omitempty"`
	// Seconds is the apply: inflate, untar and write, digest check included.
	Seconds float64 `json:"seconds"`
	// Index is "built" (this pull recorded a checkpoint index), "used", or "discarded" (a stored
	// index did not fit and the layer decoded serially); empty for layers with no index.
	Index string `json:"index,omitempty"`
}

// LayerReport is one layer of the current or last pull in ImageStatus.
type LayerReport struct {
	Digest string `json:"digest"`
	// Bytes is the compressed size; From where they came ("registry": the daemon's fetch; "peers":
	// warm peers, verified against the layer digest).
	Bytes        int64   `json:"bytes"`
	From         string  `json:"from"`
	FetchSeconds float64 `json:"fetchSeconds"`
	LayerUnpack
}

// Local is what a backend holds under one name.
type Local struct {
	Name    string        `json:"name"`
	Digest  digest.Digest `json:"digest"`
	Pinned  bool          `json:"pinned"`
	Managed bool          `json:"managed"`
	// Unpacked is true when the node platform's layers are in the snapshotter (always true for the
	// embedded backend, which has no snapshotter).
	Unpacked bool `json:"unpacked"`
}

// State is where one image stands.
type State string

// States, in the order an image passes through them.
const (
	StateQueued    State = "queued"
	StateResolving State = "resolving"
	StatePulling   State = "pulling"
	StateUnpacking State = "unpacking"
	StateReady     State = "ready"
	StateFailed    State = "failed"
)

// ImagesSection is the images part's section of the node state.
var ImagesSection = state.NewKey[ImagesStatus]("images")

// ImagesStatus is the images part's section of the node state (ImagesSection).
type ImagesStatus struct {
	Backend BackendInfo `json:"backend"`
	// Error says why no backend is available (e.g. the containerd socket does not answer).
	Error  string        `json:"error,omitempty"`
	Images []ImageStatus `json:"images"`
	// Retained counts images warmd still labels managed that left the config (policy keep).
	Retained int `json:"retained,omitempty"`
}

// ImageStatus is one wanted image.
type ImageStatus struct {
	// Ref as configured.
	Ref string `json:"ref"`
	// Name is the normalized name it is stored under.
	Name string `json:"name,omitempty"`
	// Models whose Image this is (empty for config.Images entries).
	Models []string `json:"models,omitempty"`
	State  State    `json:"state"`
	// Digest is the digest that is warm (present, unpacked, pinned); empty until one is.
	Digest string `json:"digest,omitempty"`
	Pinned bool   `json:"pinned"`
	// Pending is the digest being pulled when it differs from Digest (a moved tag).
	Pending string `json:"pending,omitempty"`
	// Layer i of Layers is being pulled; Bytes of TotalBytes are fetched.
	Layer      int   `json:"layer,omitempty"`
	Layers     int   `json:"layers,omitempty"`
	Bytes      int64 `json:"bytes,omitempty"`
	TotalBytes int64 `json:"totalBytes,omitempty"`
	// Unpacked lists, for the current or last pull on a backend that reports layers (containerd's
	// parallel and warmd paths), each layer unpacked so far, in manifest order.
	Unpacked []LayerReport `json:"unpacked,omitempty"`
	// Attempt counts tries of the current pull.
	Attempt int `json:"attempt,omitempty"`
	// Reason says why the image failed, naming the fix where there is one.
	Reason   string    `json:"reason,omitempty"`
	Resolved time.Time `json:"resolved,omitzero"`
	Updated  time.Time `json:"updated,omitzero"`
}

// Warm is true when the image is pulled, unpacked and pinned.
func (s ImageStatus) Warm() bool { return s.Digest != "" && s.Pinned }

// ForModel returns the status of the image model serves, if it has one.
func (s ImagesStatus) ForModel(model string) (ImageStatus, bool) {
	for _, im := range s.Images {
		for _, m := range im.Models {
			if m == model {
				return im, true
			}
		}
	}
	return ImageStatus{}, false
}

// ForRef returns the status of a configured ref.
func (s ImagesStatus) ForRef(ref string) (ImageStatus, bool) {
	for _, im := range s.Images {
		if im.Ref == ref || im.Name == ref {
			return im, true
		}
	}
	return ImageStatus{}, false
}
