package config

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Containerd says how to reach the node's containerd, the one the kubelet uses.
type Containerd struct {
	// Address is the containerd socket. Default /run/containerd/containerd.sock. Absolute, at most
	// 107 bytes (the kernel's limit for a unix socket path).
	Address string `json:"address,omitempty"`
	// Namespace the kubelet's images live in. Default k8s.io: images pulled elsewhere are invisible to pods.
	// A containerd identifier: letters and digits separated by '.', '_' or '-', at most 76 characters.
	Namespace string `json:"namespace,omitempty"`
	// Snapshotter to unpack into; it must be the CRI plugin's. Default overlayfs. 1..64 characters of
	// [A-Za-z0-9._-].
	Snapshotter string `json:"snapshotter,omitempty"`
	// Backend is auto (containerd when its socket answers, else embedded), containerd, or embedded
	// (a content store under the data dir; for demos and nodes without containerd). Default auto.
	Backend string `json:"backend,omitempty"`
	// Unpack is who unpacks an image's layers. warmd (default): the daemon's Transfer service fetches
	// the blobs into its content store and warmd inflates each layer with its own decoder
	// (pkg/inflate: 1.6x Go's gzip on one core; a layer seen before decodes from its checkpoint index
	// on every core) and untars it in-process with containerd's own archive.Apply onto the committed
	// parent, so the tree, the snapshot names and the GC labels are what the daemon would make. It
	// needs containerd 2.x with the Transfer API, a snapshotter that can rebase, and the daemon's
	// content and snapshot dirs visible at the paths the daemon reports (the chart mounts the
	// containerd root with warmdUnpack); where any is missing warmd logs which and the daemon unpacks
	// instead. daemon: the daemon's Transfer service fetches and unpacks, one layer after another,
	// exactly as the kubelet's and `ctr images pull` do. parallel: the daemon fetches and its diff
	// service applies each layer into its own snapshot side by side. scripts/bench/images.sh measures
	// warmd against ctr, crictl and ctr with igzip.
	Unpack string `json:"unpack,omitempty"`
}

// S3 configures the one S3 client that weights and compile caches share. Credentials never appear
// here: they come from the default AWS chain (environment, shared config files, IRSA web identity,
// EKS pod identity), so a ConfigMap never holds a secret.
type S3 struct {
	// Endpoint for S3-compatible stores (http://host:port). Empty means AWS S3.
	Endpoint string `json:"endpoint,omitempty"`
	// Region. Default us-east-1 (S3-compatible stores ignore it but the signer needs one). 1..64
	// characters of [A-Za-z0-9_-].
	Region string `json:"region,omitempty"`
	// UsePathStyle addresses buckets as endpoint/bucket rather than bucket.endpoint; most
	// S3-compatible stores need it. Default: true when Endpoint is set.
	UsePathStyle *bool `json:"usePathStyle,omitempty"`
	// Profile selects a profile from the shared AWS config files.
	Profile string `json:"profile,omitempty"`
	// MaxListKeys bounds the keys one listing (a model's prefix, a compile-cache index prefix) may
	// return; a listing past it fails naming the bound, so a bucket writer who uploads millions of
	// keys costs one failed model, not the node's memory (docs/security.md, "Bounds on S3 and peer
	// answers"). Default 100000. Range: 1..10000000.
	MaxListKeys int `json:"maxListKeys,omitempty"`
	// MaxListPages bounds the ListObjectsV2 pages one listing may take (a server can send pages of
	// one key, or none, truncated forever). Default 1000. Range: 1..1000000.
	MaxListPages int `json:"maxListPages,omitempty"`
	// StallTimeout fails one S3 request that spent this long waiting on the network while receiving
	// under 64 KiB (a server that sends nothing, or a byte every 2 s); the request is retried, and
	// the operation fails after the retries. Default 30s. Range: 1s..10m.
	StallTimeout metav1.Duration `json:"stallTimeout,omitempty"`
}

// Model is one model some nodes should serve warm.
type Model struct {
	// Name as vLLM's --model / Hugging Face id ("Qwen/Qwen2.5-7B-Instruct"); it names the HF cache dir.
	// The Hub's rules apply (pkg/model): "name" or "namespace/name", each part 1..96 characters of
	// [A-Za-z0-9._-], not starting or ending with '-' or '.', no "--" or "..", not ending in ".git".
	Name string `json:"name"`
	// Source holds the model files: s3://bucket/prefix/ or file:///path/ (an absolute, clean path).
	Source string `json:"source"`
	// Revision names the snapshot (a commit hash or a ref such as "main"). Default main. At most 128
	// bytes of [A-Za-z0-9._+-] under git's ref-name rules, and no "/": it is one snapshot dir.
	Revision string `json:"revision,omitempty"`
	// Image is the vLLM image that serves this model; it is kept warm with the weights. A valid image
	// reference (docker.io/vllm/vllm-openai:v0.11.0, or name@sha256:...).
	Image string `json:"image,omitempty"`
	// TensorParallelSize the model runs with; used to match starts and predictions. Default 1.
	// Range: 1..64.
	TensorParallelSize int `json:"tensorParallelSize,omitempty"`
	// NodeSelector picks the nodes that want this model. Empty selects every node.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Include and Exclude are glob patterns on object names relative to Source; empty Include takes all.
	// At most 100 patterns each, 1024 bytes per pattern.
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
	// SHA256Manifest names an object under Source listing "<sha256>  <file>" lines (sha256sum format)
	// used to verify files when the store gives no checksum of its own. A relative path under Source
	// (no leading "/", no "." or ".." parts).
	SHA256Manifest string `json:"sha256Manifest,omitempty"`
}

// Image is an extra image to keep pulled, unpacked and pinned.
type Image struct {
	// Ref is a tag or digest reference (docker.io/library/busybox:1.37, name@sha256:...).
	Ref string `json:"ref"`
}

// ImagePull tunes image prefetching.
type ImagePull struct {
	// ResolveInterval is how often tags are resolved to digests. Default 15m. Range: 10s..24h.
	ResolveInterval metav1.Duration `json:"resolveInterval,omitempty"`
	// Concurrency bounds images pulled at once. Default 2. Range: 1..16.
	Concurrency int `json:"concurrency,omitempty"`
	// OnRemove is what happens to an image warmd pinned once it leaves the config: unpin (default,
	// the kubelet's GC may then reclaim it), keep (stay pinned), or remove (delete every ref).
	OnRemove string `json:"onRemove,omitempty"`
	// AuthFiles are docker config.json or kubernetes.io/dockerconfigjson files with registry credentials.
	// Absolute paths, at most 32.
	AuthFiles []string `json:"authFiles,omitempty"`
	// HostsDir is a containerd hosts.toml config dir for mirrors. Default /etc/containerd/certs.d.
	// Absolute.
	HostsDir string `json:"hostsDir,omitempty"`
	// PlainHTTP lists registries (host or host:port) reached over plain HTTP. Loopback registries always
	// are. At most 100.
	PlainHTTP []string `json:"plainHTTP,omitempty"`
}

// Weights tunes model-weight prefetching.
type Weights struct {
	// Budget caps the bytes of weights kept on the node; least recently used models no pod uses are
	// evicted to make room. Zero means no cap. Range: 0, or 1Mi..1Ei.
	Budget resource.Quantity `json:"budget,omitempty"`
	// BandwidthLimit caps download bytes per second so prefetch does not starve serving. Zero: no cap.
	// Range: 0, or 1Mi..1Ti (per second).
	BandwidthLimit resource.Quantity `json:"bandwidthLimit,omitempty"`
	// Concurrency is the number of ranged GETs in flight. Default 16. Range: 1..256.
	Concurrency int `json:"concurrency,omitempty"`
	// ChunkSize is the size of one ranged GET. Default 16Mi. Range: 1Mi..1Gi.
	ChunkSize resource.Quantity `json:"chunkSize,omitempty"`
	// InUseWindow: a model whose files were opened this recently counts as in use. Default 10m.
	// Range: 1m..168h.
	InUseWindow metav1.Duration `json:"inUseWindow,omitempty"`
	// PageCache is how downloaded weights meet the page cache: bypass (default) or keep.
	//
	// bypass writes with O_DIRECT: a prefetch of 100s of GB does not evict what serving pods have
	// cached, and the data is durable sooner (on the disks measured, direct writes ran at about twice
	// the rate of buffered writes plus fsync). The page cache then holds none of the model; the
	// pre-warm (prewarm) reads it in while a vLLM pod for it starts, so the loader still reads memory.
	//
	// keep writes through the page cache, starting each finished chunk's writeback at once
	// (sync_file_range) and fsyncing before publishing, as bypass does: the model
	// stays cached as copiers such as s5cmd leave it, so a loader started right after the prefetch,
	// with no pod start to overlap a pre-warm with, reads memory rather than disk. It costs the
	// eviction of other cached data and a slower durable write; use it on nodes that load a model as
	// soon as it lands and have the memory to hold it.
	PageCache string `json:"pageCache,omitempty"`
}

// The weights.pageCache choices.
const (
	PageCacheBypass = "bypass"
	PageCacheKeep   = "keep"
)

// CompileCache configures the per-SKU torch.compile/Inductor/Triton/FlashInfer caches.
type CompileCache struct {
	// Disabled turns compile-cache management off.
	Disabled bool `json:"disabled,omitempty"`
	// Remote is s3://bucket/prefix where bundles are shared between nodes. Empty: node-local only.
	Remote string `json:"remote,omitempty"`
	// QuietPeriod without writes before new cache entries are captured. Default 60s. Range: 1s..1h.
	QuietPeriod metav1.Duration `json:"quietPeriod,omitempty"`
	// RestoreInterval is how often the SKU's shared index is read for bundles other nodes captured
	// (a restore also runs at every start). Default 10m. Range: 10s..24h.
	RestoreInterval metav1.Duration `json:"restoreInterval,omitempty"`
	// Budget caps the bytes of compile caches on the node. Zero: no cap. Range: 0, or 1Mi..1Ei.
	Budget resource.Quantity `json:"budget,omitempty"`
}

// Prewarm configures reading a model's published weights into the page cache while a vLLM pod for it
// starts on this node (its container starts and Python imports for tens of seconds), so the loader
// then reads memory instead of disk. warmd publishes weights with O_DIRECT, so without this the page
// cache holds none of them. It needs the API server (to see pods bound to this node): with
// readiness.disabled it is off.
type Prewarm struct {
	// Disabled turns pre-warming off.
	Disabled bool `json:"disabled,omitempty"`
	// MaxBytes caps the bytes one pre-warm reads. Default 64Gi. Range: 1Mi..1Ei.
	MaxBytes resource.Quantity `json:"maxBytes,omitempty"`
	// MemAvailablePercent caps one pre-warm at this share of MemAvailable (/proc/meminfo) when it
	// starts; the smaller of the two caps wins. Default 50. Range: 1..90.
	MemAvailablePercent int `json:"memAvailablePercent,omitempty"`
}

// Phases configures startup measurement of vLLM pods.
type Phases struct {
	// PodLogDir is the kubelet's pod log dir. Default /var/log/pods. Absolute.
	PodLogDir string `json:"podLogDir,omitempty"`
	// Keep is how many start records are kept. Default 200. Range: 1..10000.
	Keep int `json:"keep,omitempty"`
}

// Readiness configures what warmd publishes on its Node.
type Readiness struct {
	// Disabled stops all writes to the Node (warmd then only serves its local API).
	Disabled bool `json:"disabled,omitempty"`
	// Kubeconfig path; empty means in-cluster config. Absolute.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// StartupTaint keeps warmd.io/cold:NoSchedule on the node until it is warm.
	StartupTaint bool `json:"startupTaint,omitempty"`
	// Resync is how often the Node is re-read and corrected. Default 5m. Range: 10s..24h.
	Resync metav1.Duration `json:"resync,omitempty"`
}

// GPU configures GPU identity labels.
type GPU struct {
	// GFDLabels also publishes NVIDIA GPU Feature Discovery's nvidia.com/* names, for clusters without GFD.
	GFDLabels bool `json:"gfdLabels,omitempty"`
}

// API configures warmd's own endpoints.
type API struct {
	// Socket for the local API (`warmd status`). Default <dataDir>/warmd.sock. Absolute, at most 107
	// bytes (the kernel's limit for a unix socket path).
	Socket string `json:"socket,omitempty"`
	// Listen is the TCP address for /metrics, /healthz and /readyz. Default :9400. Nothing sensitive
	// is served there. host:port with a port in 0..65535.
	Listen string `json:"listen,omitempty"`
}
