package config

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Every number and duration of a NodeConfig has a range. A value outside it validates nowhere else:
// 2e9 GETs in flight or a negative resync interval would pass a sign check and then take the daemon
// down. The tables below are the one place the ranges live; the struct doc comments (types.go) repeat
// them for readers and TestBoundsDocumented keeps both in step.

// intBound is the range of one integer field.
type intBound struct {
	path     string
	field    string // the Go field, Type.Field, for the doc-comment check
	min, max int
	why      string
}

// durBound is the range of one duration field.
type durBound struct {
	path     string
	field    string
	min, max time.Duration
	why      string
}

// qtyBound is the range of one quantity field; zero is allowed when zeroOff (it means "no cap").
type qtyBound struct {
	path     string
	field    string
	zeroOff  bool
	min, max string
	why      string
}

// countBound caps the length of a list.
type countBound struct {
	path string
	max  int
	why  string
}

var (
	intBounds = map[string]intBound{
		"imagePull.concurrency": {"imagePull.concurrency", "ImagePull.Concurrency", 1, 16,
			"each pull holds registry connections and unpacks onto the node's disk; more only slows every pull"},
		"weights.concurrency": {"weights.concurrency", "Weights.Concurrency", 1, 256,
			"each in-flight ranged GET holds a buffer and a connection; beyond 256 only memory and S3 throttling grow"},
		"phases.keep": {"phases.keep", "Phases.Keep", 1, 10000,
			"start records are kept in memory and in the state file"},
		"prewarm.memAvailablePercent": {"prewarm.memAvailablePercent", "Prewarm.MemAvailablePercent", 1, 90,
			"a share of the memory free at the start; above 90% a pre-warm evicts what running pods need"},
		"peers.maxPeers": {"peers.maxPeers", "Peers.MaxPeers", 1, 64,
			"each peer holds connections and a share of the fetch; past 64 a peer's share is too small to pay its setup"},
		"peers.serveSlots": {"peers.serveSlots", "Peers.ServeSlots", 1, 1024,
			"downloaders one node serves at once, sharing its upload cap; past 1024 each gets too little to finish"},
		"s3.maxListKeys": {"s3.maxListKeys", "S3.MaxListKeys", 1, 10000000,
			"every listed key is held in memory while a model is planned; past 10 million that is gigabytes"},
		"s3.maxListPages": {"s3.maxListPages", "S3.MaxListPages", 1, 1000000,
			"each page is a request; past a million a hostile listing runs for hours"},
		"tensorParallelSize": {"models[].tensorParallelSize", "Model.TensorParallelSize", 1, 64,
			"the GPUs one vLLM instance spans"},
	}
	durBounds = map[string]durBound{
		"imagePull.resolveInterval": {"imagePull.resolveInterval", "ImagePull.ResolveInterval", 10 * time.Second, 24 * time.Hour,
			"below 10s every node hammers the registry; above a day a moved tag stays stale"},
		"weights.inUseWindow": {"weights.inUseWindow", "Weights.InUseWindow", time.Minute, 168 * time.Hour,
			"below a minute a model can be evicted between a loading pod's reads; above a week nothing is ever idle"},
		"compileCache.quietPeriod": {"compileCache.quietPeriod", "CompileCache.QuietPeriod", time.Second, time.Hour,
			"below 1s entries are captured while still being written; above an hour new kernels are shared too late"},
		"compileCache.restoreInterval": {"compileCache.restoreInterval", "CompileCache.RestoreInterval", 10 * time.Second, 24 * time.Hour,
			"below 10s every node polls the shared index nonstop; above a day other nodes' bundles arrive too late"},
		"peers.seedWait": {"peers.seedWait", "Peers.SeedWait", time.Second, 24 * time.Hour,
			"how long a node waits for a seed to fetch from the origin; past a day a stuck seed stalls the fleet"},
		"s3.stallTimeout": {"s3.stallTimeout", "S3.StallTimeout", time.Second, 10 * time.Minute,
			"below 1s a busy store's pause fails requests; above 10m a stuck download holds its slot for ages"},
		"peers.stallTimeout": {"peers.stallTimeout", "Peers.StallTimeout", time.Second, 10 * time.Minute,
			"below 1s a busy peer is dropped for a pause; above 10m a stuck peer holds a chunk for ages"},
		"readiness.resync": {"readiness.resync", "Readiness.Resync", 10 * time.Second, 24 * time.Hour,
			"below 10s every node loads the API server; above a day drift on the Node is never corrected"},
	}
	qtyBounds = map[string]qtyBound{
		"weights.budget": {"weights.budget", "Weights.Budget", true, "1Mi", "1Ei",
			"a budget under 1Mi evicts every model (did you forget the unit, e.g. 500Gi?)"},
		"weights.bandwidthLimit": {"weights.bandwidthLimit", "Weights.BandwidthLimit", true, "1Mi", "1Ti",
			"bytes per second; under 1Mi a model never finishes (did you forget the unit, e.g. 2Gi?)"},
		"weights.chunkSize": {"weights.chunkSize", "Weights.ChunkSize", false, "1Mi", "1Gi",
			"one ranged GET; smaller chunks cost a request each, larger ones hold memory and retry slowly"},
		"prewarm.maxBytes": {"prewarm.maxBytes", "Prewarm.MaxBytes", false, "1Mi", "1Ei",
			"bytes read into the page cache per pre-warm; under 1Mi nothing is warmed (did you forget the unit, e.g. 64Gi?)"},
		"peers.uploadLimit": {"peers.uploadLimit", "Peers.UploadLimit", false, "1Mi", "1Ti",
			"bytes per second served to peers; under 1Mi a peer is slower than the origin (did you forget the unit, e.g. 256Mi?)"},
		"compileCache.budget": {"compileCache.budget", "CompileCache.Budget", true, "1Mi", "1Ei",
			"a budget under 1Mi evicts every cache (did you forget the unit, e.g. 50Gi?)"},
	}
	countBounds = map[string]countBound{
		"models":              {"models", 1000, "each model is watched, labelled and predicted on every node"},
		"images":              {"images", 1000, "each image is resolved and pinned on every node"},
		"globs":               {"include/exclude", 100, "each pattern is matched against every object name"},
		"imagePull.authFiles": {"imagePull.authFiles", 32, "each file is read on every pull"},
		"imagePull.plainHTTP": {"imagePull.plainHTTP", 100, "a list of registry hosts"},
	}
)

// Other fixed limits.
const (
	// MaxFileBytes caps the config file. A ConfigMap holds at most 1 MiB, and YAML decoding costs
	// about twenty times the file's size in memory, so anything larger is refused before it is read.
	MaxFileBytes = 1 << 20
	// maxSocketPath is sun_path's size less its NUL: a longer unix socket path cannot be bound.
	maxSocketPath = 107
	// maxGlobLen bounds one include/exclude pattern.
	maxGlobLen = 1024
	// maxNodeName is a DNS subdomain's limit, which a Node's name obeys.
	maxNodeName = 253
	// maxStr bounds free-form strings (profile, plain-HTTP hosts).
	maxStr = 256
)

func (p *problems) intIn(key string, v int, at string) {
	b := intBounds[key]
	if at == "" {
		at = b.path
	}
	if v < b.min || v > b.max {
		p.add(at, fmt.Sprintf("%d is outside %d..%d", v, b.min, b.max), b.why)
	}
}

func (p *problems) durIn(key string, v time.Duration) {
	b := durBounds[key]
	if v < b.min || v > b.max {
		p.add(b.path, fmt.Sprintf("%s is outside %s..%s", v, fmtDur(b.min), fmtDur(b.max)), b.why)
	}
}

func (p *problems) qtyIn(key string, q resource.Quantity) {
	b := qtyBounds[key]
	if b.zeroOff && q.IsZero() {
		return
	}
	lo, hi := resource.MustParse(b.min), resource.MustParse(b.max)
	if q.Cmp(lo) < 0 || q.Cmp(hi) > 0 {
		rng := b.min + ".." + b.max
		if b.zeroOff {
			rng = "0 (no cap) or " + rng
		}
		p.add(b.path, fmt.Sprintf("%s is outside %s", q.String(), rng), b.why)
	}
}

// countIn reports a list longer than its cap and returns false then, so the caller skips checking
// each of a million entries.
func (p *problems) countIn(key string, n int, at string) bool {
	b := countBounds[key]
	if at == "" {
		at = b.path
	}
	if n > b.max {
		p.add(at, fmt.Sprintf("has %d entries; at most %d", n, b.max), b.why)
		return false
	}
	return true
}

// fmtDur prints a bound the way an operator writes it: 10s, 1m, 24h, not 24h0m0s.
func fmtDur(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
