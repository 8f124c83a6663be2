package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"warmd.io/warmd/pkg/bounded"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/discover"
)

// PeerOptions let a restore download bundles from warm peers (other warmd nodes of the same SKU)
// before the origin. The origin stays the source of truth: the digest and size of every bundle come
// from the SKU's index read from the bucket, and a peer's bytes are used only once they hash to it.
type PeerOptions struct {
	// Discover returns the base URLs (http://host:port) of peers that advertise this SKU's compile cache
	// warm (discover.CompileCache in the daemon). It runs once per restore pass that needs bundles.
	Discover func(ctx context.Context, sku string) ([]string, error)
	// Token returns the bearer token presented to peers (the projected ServiceAccount token).
	Token func() (string, error)
	// Client makes the requests; nil: one whose response-header timeout is StartTimeout.
	Client *http.Client
	// StartTimeout is how long a peer may take to start answering before the next peer, or the
	// origin, is asked instead; it also ends a response that delivers nothing for this long. Default 5s.
	StartTimeout time.Duration
	// OnBytes is told of the bytes of every bundle restored, by from (peer.FromPeer: a peer's verified
	// bundle; peer.FromOrigin: every byte read from the bucket); may be nil.
	OnBytes func(from string, n int64)
	// OnDrop is told of every peer dropped from a restore, with the reason; may be nil.
	OnDrop func(peer, reason string)
}

// peerSet is the peers of one restore pass; a dropped peer is not asked again in that pass.
type peerSet struct {
	members []*peerMember
}

type peerMember struct {
	base    string
	dropped atomic.Bool
}

// findPeers discovers this pass's peers; an error leaves the pass to the origin.
func (m *Manager) findPeers(ctx context.Context) *peerSet {
	if m.o.Peers == nil || m.o.Peers.Discover == nil {
		return nil
	}
	bases, err := m.o.Peers.Discover(ctx, m.o.SKU)
	if err != nil {
		m.log.Warn("cannot find compile-cache peers; restoring from the origin", "err", err)
		return nil
	}
	ps := &peerSet{}
	for _, b := range bases {
		ps.members = append(ps.members, &peerMember{base: b})
	}
	return ps
}

func (m *Manager) drop(p *peerMember, reason string, err error) {
	if p.dropped.Swap(true) {
		return
	}
	m.log.Warn("dropped a compile-cache peer for the rest of this restore", "peer", p.base, "reason", reason, "err", err)
	m.mu.Lock()
	m.stats.PeersDropped++
	m.mu.Unlock()
	if m.o.Peers.OnDrop != nil {
		m.o.Peers.OnDrop(p.base, reason)
	}
}

// counted adds n received bundle bytes to the stats and the callback.
func (m *Manager) counted(from string, n int64) {
	if n == 0 {
		return
	}
	m.mu.Lock()
	if from == peer.FromPeer {
		m.stats.PeerBytes += n
	} else {
		m.stats.OriginBytes += n
	}
	m.mu.Unlock()
	if m.o.Peers != nil && m.o.Peers.OnBytes != nil {
		m.o.Peers.OnBytes(from, n)
	}
}

// errNotThere is a peer's 404: it does not keep the bundle; not a fault.
var errNotThere = errors.New("peer does not keep the bundle")

// errLocal marks a failure on this node's side (the kept dir): the origin is asked, no peer dropped.
var errLocal = errors.New("cannot keep the bundle locally")

// errCorruptPeer marks bytes from a peer that are not the bundle the index names.
var errCorruptPeer = errors.New("peer sent bytes that do not match the index's sha256 and size")

// fromPeers downloads e from the first peer that has it into the kept dir, verified against the
// index's size and sha256. It returns false when no peer delivered it (the origin is asked then): no
// peer keeps it, peers failed (each dropped), or one sent wrong bytes (dropped as corrupt; the
// origin is asked at once rather than another peer).
func (m *Manager) fromPeers(ctx context.Context, ps *peerSet, e IndexEntry) bool {
	if ps == nil || m.kept == nil {
		return false
	}
	for _, p := range ps.members {
		if p.dropped.Load() {
			continue
		}
		err := m.fromPeer(ctx, p, e)
		switch {
		case err == nil:
			return true
		case ctx.Err() != nil:
			return false
		case errors.Is(err, errNotThere):
		case errors.Is(err, errLocal):
			m.log.Warn("cannot take a bundle from peers; restoring it from the origin", "bundle", e.SHA256[:12], "err", err)
			return false
		case errors.Is(err, errCorruptPeer):
			m.drop(p, peer.DropCorrupt, err)
			return false
		default:
			m.drop(p, peer.DropError, err)
		}
	}
	return false
}

// fromPeer downloads e from p and commits it to the kept dir when its bytes match.
func (m *Manager) fromPeer(ctx context.Context, p *peerMember, e IndexEntry) error {
	po := m.o.Peers
	tok, err := po.Token()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peer.BundleURL(p.base, e.SHA256), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	// Bytes as stored: without this net/http asks for gzip and decodes it itself, unbounded.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := m.peerClient().Do(req)
	if err != nil {
		return fmt.Errorf("request bundle: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errNotThere
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("request bundle: %s", resp.Status)
	case bounded.CheckEncoding(resp.Header.Get("Content-Encoding")) != nil:
		return fmt.Errorf("%w: %w", errCorruptPeer, bounded.CheckEncoding(resp.Header.Get("Content-Encoding")))
	case resp.ContentLength >= 0 && resp.ContentLength != e.Size:
		return fmt.Errorf("%w: %d bytes offered, the index says %d", errCorruptPeer, resp.ContentLength, e.Size)
	}
	k := m.newKeeper()
	if k.t == nil {
		return errLocal
	}
	// A response that stalls for StartTimeout is cut, like one slow to start.
	stall := m.startTimeout()
	timer := time.AfterFunc(stall, func() { cancel(errors.New("peer stalled")) })
	defer timer.Stop()
	body := &stallReader{r: io.LimitReader(resp.Body, e.Size+1), t: timer, d: stall}
	_, err = io.Copy(k, body)
	if err != nil {
		k.abort()
		if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
			err = c
		}
		return fmt.Errorf("read bundle: %w", err)
	}
	if !k.matches(e) {
		k.abort()
		return errCorruptPeer
	}
	if err := k.commit(e); err != nil {
		return fmt.Errorf("%w: %w", errLocal, err)
	}
	m.counted(peer.FromPeer, k.n) // only verified bytes count as the peers'
	return nil
}

func (m *Manager) startTimeout() time.Duration {
	if d := m.o.Peers.StartTimeout; d > 0 {
		return d
	}
	return 5 * time.Second
}

func (m *Manager) peerClient() *http.Client {
	if m.o.Peers.Client != nil {
		return m.o.Peers.Client
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.client == nil {
		m.client = peer.NewClient(m.startTimeout())
	}
	return m.client
}

// stallReader pushes the stall timer back on every read that returns bytes.
type stallReader struct {
	r io.Reader
	t *time.Timer
	d time.Duration
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.t.Reset(s.d)
	}
	return n, err
}

// MetricsModel is the model label of warmd_peer_fetched_bytes_total for compile-cache bundle bytes:
// the metric counts weights by model, and bundles under this one fixed value.
const MetricsModel = "compile-cache"

// NewPeerOptions builds the PeerOptions the daemon part runs with when peers.enabled and an API client
// exist: peers found from the Node labels (discover.CompileCache), the projected token, the shared
// warmd_peer_* metrics. nil otherwise (bundles come from the bucket alone).
func NewPeerOptions(d daemon.Deps) *PeerOptions {
	cfg := d.Config
	if !cfg.Peers.Enabled || d.Kube == nil {
		return nil
	}
	_, port, _ := net.SplitHostPort(cfg.Peers.Listen)
	tf := &discover.TokenFile{Path: cfg.Peers.TokenFile}
	kube, self, k := d.Kube, cfg.NodeName, cfg.Peers.MaxPeers
	po := &PeerOptions{Token: tf.Token, Discover: func(ctx context.Context, sku string) ([]string, error) {
		return discover.CompileCache(ctx, kube, sku, self, port, k)
	}}
	if d.Metrics != nil && d.Metrics.Peers != nil {
		m := d.Metrics.Peers
		po.OnBytes = func(from string, n int64) { m.FetchedBytes.WithLabelValues(MetricsModel, from).Add(float64(n)) }
		po.OnDrop = func(_, reason string) { m.Dropped.WithLabelValues(reason).Inc() }
	}
	return po
}
