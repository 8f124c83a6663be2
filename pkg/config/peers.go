package config

import (
	"fmt"
	"net"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults of Peers.
const (
	DefaultPeerListen    = ":9401"
	DefaultPeerAudience  = "warmd.io/peer"
	DefaultPeerTokenFile = "/var/run/secrets/warmd.io/peer/token"
	DefaultPeerSA        = "warmd/warmd"
	// DefaultPeerUploadLimit is 256 MiB/s (about 2.1 Gbit/s): a quarter of a 10 Gbit NIC, under a
	// tenth of the 25-100 Gbit NICs GPU nodes carry, and a sixth of the 1.5 GB/s one NVMe drive wrote
	// direct here. Serving then never takes the node's pods more than a slice of disk or network,
	// while 8 warm peers still give a cold node about 2 GiB/s.
	DefaultPeerUploadLimit = "256Mi"
	DefaultMaxPeers        = 4
	// DefaultServeSlots is 2: a node serves two downloaders at once at half its cap each, so they
	// finish (and serve in turn) soon, while a single slow downloader does not leave the cap idle.
	DefaultServeSlots = 2
	// DefaultPeerStallTimeout: a warm peer on the node network answers in milliseconds; 10s without
	// progress means it is gone or hostile, and the origin is there to continue.
	DefaultPeerStallTimeout = 10 * time.Second
)

// Peers configures fleet peer distribution: a warm node serves the weights it verified and published,
// its kept compile-cache bundles and the layers of the images it pulled and pinned to other warmd
// pods on a node port, and a cold node fetches them from up to MaxPeers warm nodes (found from the
// Node labels warmd writes) instead of the origin, which stays the source of truth for every file's
// identity (a layer's is its digest).
//
// It is off by default: it opens a port on the host network and needs what only the deployment can
// give — a projected ServiceAccount token with the peer audience (TokenFile) on every pod, RBAC to
// create tokenreviews and to read and write Leases in warmd's namespace (the seed, see SeedWait), and
// the API server (readiness not disabled). The chart turns it on with all of them (values
// peers.enabled).
type Peers struct {
	// Enabled turns peer serving and peer fetching on. Default false (see above).
	Enabled bool `json:"enabled,omitempty"`
	// Listen is the TCP address of the peer server, separate from api.listen (which serves /metrics
	// to anyone): the port must be the same on every node, peers dial the Node's InternalIP at it.
	// Default :9401. host:port with a port in 1..65535.
	Listen string `json:"listen,omitempty"`
	// Audience the peer tokens are issued for and checked against, so a token a pod holds for the
	// API server (or anything else) does not open the peer port. Default warmd.io/peer. At most 256
	// bytes, no spaces or control characters.
	Audience string `json:"audience,omitempty"`
	// TokenFile is the projected ServiceAccount token presented to peers; it is re-read as the kubelet
	// rotates it. Default /var/run/secrets/warmd.io/peer/token. Absolute.
	TokenFile string `json:"tokenFile,omitempty"`
	// ServiceAccount is "namespace/name" of warmd's own ServiceAccount: only its tokens are served.
	// Default warmd/warmd.
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// UploadLimit caps the bytes per second this node serves to all peers together. Default 256Mi
	// (see DefaultPeerUploadLimit). Range: 1Mi..1Ti (per second).
	UploadLimit resource.Quantity `json:"uploadLimit,omitempty"`
	// MaxPeers is K, the warm peers one model fetch reads from in parallel. Default 4. Range: 1..64.
	MaxPeers int `json:"maxPeers,omitempty"`
	// ServeSlots is how many downloaders (nodes) this node serves at once; the others are answered
	// 503 with Retry-After and take those chunks from another peer or the origin. Sharing the upload
	// cap among every node that asks makes all of them slow; serving a few lets them finish and serve
	// in turn, so warm nodes double per wave (docs/fleet.md). While the downloaders served leave the
	// cap under-used (under 3/4 of it over the last second: each is held back by its own disk or
	// link), one more is taken per second, up to 4 × ServeSlots. Default 2. Range: 1..1024.
	ServeSlots int `json:"serveSlots,omitempty"`
	// SeedWait bounds how long a node that finds no warm peer waits while another node (the seed: the
	// holder of the model revision's Lease, warmd-seed-<hash> in warmd's namespace, which the first node
	// to ask takes) fetches it from the origin. Without the wait, a node group that starts together
	// would all read the origin at once, which is what peers are for avoiding. A seed that stops
	// renewing its Lease (it died) is replaced within 15s by a waiting node. Default 10m. Range: 1s..24h.
	SeedWait metav1.Duration `json:"seedWait,omitempty"`
	// StallTimeout drops a peer whose answer spent this long waiting on the network while receiving
	// under 64 KiB (its chunk continues from the origin); serving, it closes the connection of a
	// downloader that took this long to accept one piece (its slot is freed). Default 10s. Range:
	// 1s..10m.
	StallTimeout metav1.Duration `json:"stallTimeout,omitempty"`
}

func (c *NodeConfig) defaultPeers() {
	p := &c.Peers
	setStr(&p.Listen, DefaultPeerListen)
	setStr(&p.Audience, DefaultPeerAudience)
	setStr(&p.TokenFile, DefaultPeerTokenFile)
	setStr(&p.ServiceAccount, DefaultPeerSA)
	if p.UploadLimit.IsZero() {
		p.UploadLimit = resource.MustParse(DefaultPeerUploadLimit)
	}
	setInt(&p.MaxPeers, DefaultMaxPeers)
	setInt(&p.ServeSlots, DefaultServeSlots)
	setDur(&p.SeedWait, 10*time.Minute)
	setDur(&p.StallTimeout, DefaultPeerStallTimeout)
}

// PeerUsername is the API server's user name for the configured ServiceAccount's tokens.
func (p Peers) PeerUsername() string {
	return "system:serviceaccount:" + strings.Replace(p.ServiceAccount, "/", ":", 1)
}

func (c *NodeConfig) validatePeers(p *problems) {
	pc := c.Peers
	if host, port, err := net.SplitHostPort(pc.Listen); err != nil || !validPort(port) || port == "0" || hasControl(host) {
		p.add("peers.listen", fmt.Sprintf("%s is not host:port", quote(pc.Listen)), "use e.g. "+DefaultPeerListen)
	} else if pc.Listen == c.API.Listen {
		p.add("peers.listen", fmt.Sprintf("%s is api.listen too", quote(pc.Listen)), "give the peer server its own port, e.g. "+DefaultPeerListen)
	}
	if pc.Audience == "" || len(pc.Audience) > maxStr || hasControl(pc.Audience) || strings.ContainsAny(pc.Audience, " \t") {
		p.add("peers.audience", fmt.Sprintf("%s is not a token audience", quote(pc.Audience)), "use e.g. "+DefaultPeerAudience)
	}
	p.absDir("peers.tokenFile", pc.TokenFile, "use the projected token's path, e.g. "+DefaultPeerTokenFile)
	ns, name, ok := strings.Cut(pc.ServiceAccount, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		p.add("peers.serviceAccount", fmt.Sprintf("%s is not namespace/name", quote(pc.ServiceAccount)), "name warmd's own ServiceAccount, e.g. "+DefaultPeerSA)
	}
	p.qtyIn("peers.uploadLimit", pc.UploadLimit)
	p.intIn("peers.maxPeers", pc.MaxPeers, "")
	p.intIn("peers.serveSlots", pc.ServeSlots, "")
	p.durIn("peers.seedWait", pc.SeedWait.Duration)
	p.durIn("peers.stallTimeout", pc.StallTimeout.Duration)
	if pc.Enabled && c.Readiness.Disabled {
		p.add("peers.enabled", "needs the API server, but readiness is disabled",
			"peers are found from Node labels and tokens checked with TokenReview; enable readiness or disable peers")
	}
}
