// Package peer holds what both sides of fleet peer distribution share: the URL a warm node serves a
// published weight file at, and the header that carries the serving node's view of the file's size.
// The same server hands out the compile-cache bundles a node verified and kept, and the layer
// blobs of the images it pulled and pinned, by digest.
// A fleet scales out in node groups that all pull the same weights at once; the warm nodes already hold
// verified copies, and the Node labels warmd writes already say which node holds which model, so a cold
// node can read chunks from its warm peers instead of the origin (which stays the source of truth for
// every file's identity). The server is in serve/, the token check in auth/, the fetching weights
// source in pkg/prefetch/weights/source/peer. This package does no I/O.
package peer

import (
	"net/url"
	"slices"
	"time"
)

// WeightsPath is the path of the weights endpoint; the model, revision and file travel as query
// parameters so each is one opaque value the server validates (pkg/model, fsroot.Path) before use.
const WeightsPath = "/v1/weights"

// WeightsURL is the URL of one published file of model at revision on the peer at base
// (http://host:port).
func WeightsURL(base, model, revision, file string) string {
	q := url.Values{"model": {model}, "revision": {revision}, "file": {file}}
	return base + WeightsPath + "?" + q.Encode()
}

// WeightFilesPath is the endpoint that says which files of a model revision (the same query
// parameters) a node can serve now: the whole revision once it is published, or the files of a
// download in flight that it verified so far (WeightFiles), so a downloader can read a file from a
// node whose revision is not finished yet.
const WeightFilesPath = "/v1/weights/files"

// WeightFilesURL is the URL of the served-files answer for model at revision on the peer at base.
func WeightFilesURL(base, model, revision string) string {
	q := url.Values{"model": {model}, "revision": {revision}}
	return base + WeightFilesPath + "?" + q.Encode()
}

// WeightFiles is the body of a WeightFilesPath answer: Complete when the node holds the whole
// revision verified and published (Files is then empty), else Files names the files it verified
// so far. A fetcher treats it as hostile input like any answer: bounded, and each name checked
// against the origin's listing before it is asked for.
type WeightFiles struct {
	Complete bool     `json:"complete,omitempty"`
	Files    []string `json:"files,omitempty"`
	// Pieces names the files of which only some parts are verified so far (each part against the
	// origin's part checksum), with those parts' byte ranges, [start, end), sorted and disjoint: a
	// downloader may ask for a range that lies inside one of them.
	Pieces map[string][][2]int64 `json:"pieces,omitempty"`
}

// MaxWeightFiles bounds the names one WeightFiles answer may carry, and MaxWeightFilesBytes its
// body: a revision of a million files is past what a peer download would be asked to share.
const (
	MaxWeightFiles      = 100_000
	MaxPieceSpans       = 10_000 // per file: S3's own limit on the parts of one upload
	MaxWeightFilesBytes = 16 << 20
)

// BundlePath is the path prefix of the compile-cache bundle endpoint: a kept bundle is served at
// BundlePath + its sha256 (64 lowercase hex digits), the digest the SKU's index names, so a bundle is
// asked for by the identity the origin gave it and nothing else.
const BundlePath = "/v1/bundles/sha256/"

// ValidDigest reports whether s can name a bundle in a URL: exactly 64 lowercase hex digits, so it
// is one safe path element and nothing else can be asked for.
func ValidDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// BundleURL is the URL of the compile-cache bundle with digest sha on the peer at base.
func BundleURL(base, sha string) string { return base + BundlePath + sha }

// ImageBlobPath is the path prefix of the image layer endpoint: a layer blob of an image the node
// pulled and pinned is served at ImageBlobPath + its sha256 (64 lowercase hex digits), the digest
// the image's manifest names, so a fresh node asks for a layer by the identity it verifies.
const ImageBlobPath = "/v1/images/blobs/sha256/"

// ImageBlobURL is the URL of the image layer blob with digest sha on the peer at base.
func ImageBlobURL(base, sha string) string { return base + ImageBlobPath + sha }

// ImageIndexPath is the path prefix of the gzip checkpoint index a node keeps for a layer it
// serves, by the layer's sha256: the index lets a fresh node decode the layer on every core. It is
// hostile input to the fetcher like any index (validated, its output checked against the diff ID).
const ImageIndexPath = "/v1/images/indexes/sha256/"

// ImageIndexURL is the URL of the checkpoint index of the layer with digest sha on the peer at base.
func ImageIndexURL(base, sha string) string { return base + ImageIndexPath + sha }

// The label values both fetching sides (weights, compile-cache bundles) give the shared peer
// metrics: where bytes came from (warmd_peer_fetched_bytes_total's from label) and why a peer was
// dropped (warmd_peer_dropped_total's reason label).
const (
	FromPeer    = "peer"
	FromOrigin  = "origin"
	DropCorrupt = "corrupt" // the peer's bytes did not verify
	DropError   = "error"   // the peer failed the request (network, status, a wrong answer's shape)
)

// HeaderSize carries the size of the file the peer holds, so a fetcher can refuse a peer whose copy
// differs from the origin's identity before reading a byte of it.
const HeaderSize = "X-Warmd-Size"

// HeaderNode carries the fetching node's name, so a serving node counts one downloader per node even
// when several nodes reach it from one address (SNAT, or loopback in tests). It is only a hint among
// callers the token check already let through: the serving slots it keys are a fairness aid between
// warmd pods, not a security boundary (the upload cap is).
const HeaderNode = "X-Warmd-Node"

// HeaderServing carries how many other peers serve the fetching node now (sent a range within the
// last ServingWithin). A serving node whose slots are full hands the slot of a downloader served
// elsewhere too to one served nowhere (pkg/peer/serve, "one slot per downloader"). Like HeaderNode
// it is a fairness hint between warmd pods: a downloader that lies costs others speed, not bytes.
const HeaderServing = "X-Warmd-Serving-Peers"

// HeaderBusyFile, "1" on a busy answer, says that only the file asked for is busy at that node (its
// copy from there goes to another downloader now, pkg/peer/serve "spread"): the fetching side asks
// that node for other files meanwhile, and for this one again after Retry-After.
const HeaderBusyFile = "X-Warmd-Busy-File"

// ServingWithin is how recently a peer must have sent a range to count as serving a fetch
// (HeaderServing): a serving slot outlives its last request by a second, and a fetch asks for its
// next range within milliseconds while a peer serves it.
const ServingWithin = 2 * time.Second

// Covers reports whether spans (byte ranges [start, end), sorted and disjoint, as WeightFiles.Pieces
// carries them) hold all of [off, end): what a server checks before it answers a range of a partly
// verified file, and a downloader before it asks for one.
func Covers(spans [][2]int64, off, end int64) bool {
	i, _ := slices.BinarySearchFunc(spans, off, func(sp [2]int64, a int64) int {
		switch {
		case sp[1] <= a:
			return -1
		case sp[0] > a:
			return 1
		}
		return 0
	})
	return i < len(spans) && spans[i][0] <= off && end <= spans[i][1]
}
