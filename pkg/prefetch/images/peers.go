package images

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/discover"
	"warmd.io/warmd/pkg/prefetch/images/containerd"
	"warmd.io/warmd/pkg/prefetch/images/peerblobs"
)

// MetricsModel is the model label of warmd_peer_fetched_bytes_total for image layer bytes.
const MetricsModel = "image"

// layerOpener is what a backend offers the peer server: the layer blobs of the images it pulled
// and pinned and their checkpoint indexes (the containerd backend; the embedded store serves none).
type layerOpener interface {
	OpenBlob(ctx context.Context, sha string) (*os.File, error)
	OpenIndex(ctx context.Context, sha string) (*os.File, error)
}

var _ layerOpener = (*containerd.Backend)(nil)

func (m *Manager) layers() (layerOpener, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.backend.(layerOpener)
	return b, ok
}

// OpenBlob hands the peer server a layer blob of an image this node pulled and pinned, from the
// backend open now; fs.ErrNotExist when there is none or it cannot serve layers.
func (m *Manager) OpenBlob(ctx context.Context, sha string) (*os.File, error) {
	if b, ok := m.layers(); ok {
		return b.OpenBlob(ctx, sha)
	}
	return nil, fs.ErrNotExist
}

// OpenIndex hands the peer server the checkpoint index kept for such a layer.
func (m *Manager) OpenIndex(ctx context.Context, sha string) (*os.File, error) {
	if b, ok := m.layers(); ok {
		return b.OpenIndex(ctx, sha)
	}
	return nil, fs.ErrNotExist
}

// layerPeers is how the containerd backend finds and reads warm peers' layers for the manager:
// each call reads the config in force (peers.* reloads need no reopen).
type layerPeers struct {
	m    *Manager
	kube kube.Interface

	mu     sync.Mutex
	tokens *discover.TokenFile
}

// backendPeers is the Peers the containerd backend takes layers from; nil without an API server
// (no Node labels to find peers by). The node name and stall timeout are taken when the backend
// opens.
func (m *Manager) backendPeers(cfg *config.NodeConfig, kube kube.Interface, met *metrics.Peers) *containerd.Peers {
	if kube == nil {
		return nil
	}
	lp := &layerPeers{m: m, kube: kube}
	o := peerblobs.Options{Token: lp.token, Node: cfg.NodeName, Stall: cfg.Peers.StallTimeout.Duration, Log: m.log}
	if met != nil {
		o.OnBytes = func(n int64) { met.FetchedBytes.WithLabelValues(MetricsModel, peer.FromPeer).Add(float64(n)) }
		o.OnDrop = func(_, reason string) { met.Dropped.WithLabelValues(reason).Inc() }
	}
	return &containerd.Peers{Find: lp.find, Fetch: o, MinSize: containerd.DefaultPeerMinSize, Layers: 2}
}

// find returns up to peers.maxPeers nodes whose label for a model the image serves says the
// image is there (warm, or image: only the image is ready): a node that no longer holds this
// digest answers 404 and costs one HEAD.
func (lp *layerPeers) find(ctx context.Context, name string) ([]string, error) {
	cfg := lp.m.config()
	if !cfg.Peers.Enabled {
		return nil, nil
	}
	_, port, err := net.SplitHostPort(cfg.Peers.Listen)
	if err != nil {
		return nil, fmt.Errorf("peers.listen %q: %w", cfg.Peers.Listen, err)
	}
	var models []string
	for _, w := range Wanted(cfg, lp.m.opts.Wants) {
		if w.Name == name {
			models = w.Models
		}
	}
	k := max(cfg.Peers.MaxPeers, 1)
	seen := map[string]bool{}
	var out []string
	for _, mod := range models {
		if len(out) >= k {
			break
		}
		sel := fmt.Sprintf("%s in (%s,%s)", model.LabelKey(mod), nodelabels.StateWarm, nodelabels.StateImage)
		ps, err := discover.Peers(ctx, lp.kube, sel, cfg.NodeName, port, k, "0", nil)
		if err != nil {
			return out, err
		}
		for _, p := range ps {
			if !seen[p] && len(out) < k {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// token reads the projected token from the peers.tokenFile in force.
func (lp *layerPeers) token() (string, error) {
	path := lp.m.config().Peers.TokenFile
	lp.mu.Lock()
	if lp.tokens == nil || lp.tokens.Path != path {
		lp.tokens = &discover.TokenFile{Path: path}
	}
	tf := lp.tokens
	lp.mu.Unlock()
	return tf.Token()
}
