package peer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/peer/discover"
	"warmd.io/warmd/pkg/prefetch"
)

// WarmValues are the values of a model's Node label (models.warmd.io/<model>, written by
// pkg/readiness) that mean the node holds the model's weights verified: "warm", and "weights" (weights
// verified, something else missing). Only such nodes are asked.
var WarmValues = []string{"warm", "weights"}

// Find returns the base URLs (http://InternalIP:port) of up to k nodes other than self whose label
// labelKey says they hold the model's weights verified, in random order so a node group spreads its
// load over every warm node rather than the first k.
func Find(ctx context.Context, c kubernetes.Interface, labelKey, self string, port string, k int) ([]string, error) {
	return find(ctx, c, labelKey, self, port, k, "")
}

// find is Find reading the Nodes at resourceVersion rv: "" is a consistent read (the first look, which
// decides whether to wait for a seed); "0" is served from the API server's watch cache, which is what
// the lookups repeated during a fetch use, so they cost the API server no etcd read.
func find(ctx context.Context, c kubernetes.Interface, labelKey, self, port string, k int, rv string) ([]string, error) {
	sel := fmt.Sprintf("%s in (%s)", labelKey, strings.Join(WarmValues, ","))
	return discover.Peers(ctx, c, sel, self, port, k, rv, nil)
}

// ColdValues are the label values of a node that wants the model and is getting it (not warm, not
// failed): such a node may be the seed others wait for.
var ColdValues = []string{"cold", "image"}

// Seed returns the name of the node the fleet waits for to fetch the model from the origin first — the
// first by name of the nodes that want it and do not hold it yet — when that is not self; "" when self
// is the seed (or no other node wants the model). labelled says whether self's own Node carries the
// label yet: until it does, readiness may not have labelled the others either.
func Seed(ctx context.Context, c kubernetes.Interface, labelKey, self string) (seed string, labelled bool, err error) {
	sel := fmt.Sprintf("%s in (%s)", labelKey, strings.Join(ColdValues, ","))
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return "", false, fmt.Errorf("find the seed: list nodes with %s: %w", sel, err)
	}
	for _, n := range nodes.Items {
		if n.Name == self {
			labelled = true
		}
		if n.Name < self && (seed == "" || n.Name < seed) {
			seed = n.Name
		}
	}
	return seed, labelled, nil
}

// settle bounds how long a node whose own Node has no label for the model yet waits for the labels
// (readiness writes them as it starts) before it decides it is the seed.
const settle = 30 * time.Second

// findOrWait returns warm peers, waiting up to wait (polling every poll) while another node is the seed
// and no peer is warm yet.
func findOrWait(ctx context.Context, c kubernetes.Interface, labelKey, self, port string, k int, wait, poll time.Duration, log *slog.Logger) ([]string, error) {
	start := time.Now()
	deadline := start.Add(wait)
	logged := false
	for {
		peers, err := Find(ctx, c, labelKey, self, port, k)
		if err != nil || len(peers) > 0 {
			return peers, err
		}
		seed, labelled, err := Seed(ctx, c, labelKey, self)
		if err != nil || time.Now().After(deadline) {
			return nil, err
		}
		// Nodes of a group start seconds apart: a node decides it is the seed only after a short
		// settle (a tenth of the wait, at most 10s) in which the others' labels can appear.
		if seed == "" && ((labelled && time.Since(start) >= min(wait/10, 10*time.Second)) || time.Since(start) > min(wait, settle)) {
			return nil, nil // this node is the seed
		}
		if !logged && seed != "" {
			log.Info("no warm peer yet: waiting while the seed fetches from the origin", "seed", seed, "wait", wait)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// TokenFile reads the projected ServiceAccount token presented to peers (shared with the compile
// cache's restore, see discover.TokenFile).
type TokenFile = discover.TokenFile

// refreshEvery is Options.RefreshEvery for the daemon's fetches (a variable for tests).
var refreshEvery = DefaultRefreshEvery

// busyGrace is how long the daemon's chunks wait for a busy peer's slot before the seed may read
// them from the origin: a tenth of the seed wait, at most 30s. In a fleet whose downloads take
// minutes it costs little; where they take seconds (a small model, a fast network) slots free
// before it ends and the origin is not read at all.
func busyGrace(seedWait time.Duration) time.Duration { return min(seedWait/10, 30*time.Second) }

// maxFound bounds the warm peers one lookup during a fetch returns.
const maxFound = 1024

// Wrap returns an opener that puts the peers of each model in front of the source open returns, for
// the weights manager (a fetch with no warm peer reads the origin alone, still counted by source). With
// peers off it returns open.
func Wrap(open func(context.Context, config.Model) (prefetch.Source, error), c kubernetes.Interface, cfg *config.NodeConfig,
	m *metrics.Peers, log *slog.Logger) func(context.Context, config.Model) (prefetch.Source, error) {
	if !cfg.Peers.Enabled || c == nil {
		return open
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("part", "weights")
	_, port, _ := net.SplitHostPort(cfg.Peers.Listen)
	names := make([]string, 0, len(cfg.Models))
	for _, md := range cfg.Models {
		names = append(names, md.Name)
	}
	keys := model.LabelKeys(names)
	tf := &TokenFile{Path: cfg.Peers.TokenFile}
	return func(ctx context.Context, md config.Model) (prefetch.Source, error) {
		origin, err := open(ctx, md)
		if err != nil {
			return nil, err
		}
		// Found at the first chunk, not now: a model already published is never fetched, so its
		// node never waits for a seed. Without peers the source still counts every byte as the origin's.
		discover := func(ctx context.Context) ([]string, error) {
			return findOrWait(ctx, c, keys[md.Name], cfg.NodeName, port, cfg.Peers.MaxPeers, cfg.Peers.SeedWait.Duration, 2*time.Second, log)
		}
		// During the fetch, every warm peer is a candidate (in random order); the source adds the new
		// ones it can use.
		refresh := func(ctx context.Context) ([]string, error) {
			return find(ctx, c, keys[md.Name], cfg.NodeName, port, maxFound, "0")
		}
		// A chunk every warm peer turned away busy waits for a slot; after busyGrace it goes to the
		// origin if this node is the seed (the first by name of the nodes still wanting the model):
		// one node of a group reads the origin at a time, as at the start (docs/fleet.md).
		gate := func(ctx context.Context) (bool, error) {
			seed, _, err := Seed(ctx, c, keys[md.Name], cfg.NodeName)
			return seed == "", err
		}
		o := Options{Origin: origin, Model: md.Name, Revision: md.Revision, Discover: discover, Refresh: refresh,
			RefreshEvery: refreshEvery, OriginGate: gate, BusyGrace: busyGrace(cfg.Peers.SeedWait.Duration), BusyWait: cfg.Peers.SeedWait.Duration, MaxPeers: cfg.Peers.MaxPeers,
			Node: cfg.NodeName, Token: tf.Token, Stall: cfg.Peers.StallTimeout.Duration, Log: log}
		if m != nil { // nil in tests that build the opener alone
			o.OnBytes = func(from string, n int64) { m.FetchedBytes.WithLabelValues(md.Name, from).Add(float64(n)) }
			o.OnDrop = func(_, reason string) { m.Dropped.WithLabelValues(reason).Inc() }
		}
		return New(o), nil
	}
}
