package config

import (
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Default values, in one place. The struct doc comments repeat them for readers of the types.
const (
	DefaultDataDir          = "/var/lib/warmd"
	DefaultContainerdSocket = "/run/containerd/containerd.sock"
	DefaultNamespace        = "k8s.io"
	DefaultSnapshotter      = "overlayfs"
	DefaultRegion           = "us-east-1"
	DefaultListen           = ":9400"
	DefaultPodLogDir        = "/var/log/pods"
	DefaultHostsDir         = "/etc/containerd/certs.d"
)

// Bounds on S3 answers (docs/security.md, "Bounds on S3 and peer answers").
const (
	// DefaultMaxListKeys: the largest models have a few thousand files; 100,000 keys is far above
	// any model and a listing of that many still costs only a few tens of MB.
	DefaultMaxListKeys = 100000
	// DefaultMaxListPages: 100,000 keys at S3's 1,000 per page is 100 pages; 1,000 leaves room for
	// stores that page in hundreds.
	DefaultMaxListPages = 1000
	// DefaultS3StallTimeout: 30s without 64 KiB of progress rides out a store's brief pause and
	// still frees a stuck download in well under a minute per try.
	DefaultS3StallTimeout = 30 * time.Second
)

// Default fills every unset field with its default. It is idempotent.
func (c *NodeConfig) Default() {
	if c.NodeName == "" {
		c.NodeName = os.Getenv("NODE_NAME")
	}
	if c.NodeName == "" {
		c.NodeName, _ = os.Hostname()
	}
	setStr(&c.DataDir, DefaultDataDir)
	setStr(&c.Containerd.Address, DefaultContainerdSocket)
	setStr(&c.Containerd.Namespace, DefaultNamespace)
	setStr(&c.Containerd.Snapshotter, DefaultSnapshotter)
	setStr(&c.Containerd.Backend, "auto")
	setStr(&c.Containerd.Unpack, "warmd")
	setStr(&c.S3.Region, DefaultRegion)
	setInt(&c.S3.MaxListKeys, DefaultMaxListKeys)
	setInt(&c.S3.MaxListPages, DefaultMaxListPages)
	setDur(&c.S3.StallTimeout, DefaultS3StallTimeout)
	if c.S3.UsePathStyle == nil {
		v := c.S3.Endpoint != ""
		c.S3.UsePathStyle = &v
	}
	for i := range c.Models {
		m := &c.Models[i]
		setStr(&m.Revision, "main")
		if m.TensorParallelSize == 0 {
			m.TensorParallelSize = 1
		}
	}
	setDur(&c.ImagePull.ResolveInterval, 15*time.Minute)
	setInt(&c.ImagePull.Concurrency, 2)
	setStr(&c.ImagePull.OnRemove, "unpin")
	setStr(&c.ImagePull.HostsDir, DefaultHostsDir)
	setInt(&c.Weights.Concurrency, 16)
	if c.Weights.ChunkSize.IsZero() {
		c.Weights.ChunkSize = resource.MustParse("16Mi")
	}
	setDur(&c.Weights.InUseWindow, 10*time.Minute)
	setStr(&c.Weights.PageCache, PageCacheBypass)
	setDur(&c.CompileCache.QuietPeriod, 60*time.Second)
	setDur(&c.CompileCache.RestoreInterval, 10*time.Minute)
	if c.Prewarm.MaxBytes.IsZero() {
		c.Prewarm.MaxBytes = resource.MustParse("64Gi")
	}
	setInt(&c.Prewarm.MemAvailablePercent, 50)
	setStr(&c.Phases.PodLogDir, DefaultPodLogDir)
	setInt(&c.Phases.Keep, 200)
	setDur(&c.Readiness.Resync, 5*time.Minute)
	setStr(&c.API.Socket, filepath.Join(c.DataDir, "warmd.sock"))
	setStr(&c.API.Listen, DefaultListen)
	c.defaultPeers()
}

func setStr(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

func setInt(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}

func setDur(p *metav1.Duration, v time.Duration) {
	if p.Duration == 0 {
		p.Duration = v
	}
}
