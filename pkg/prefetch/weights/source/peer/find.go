package peer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/peer/discover"
	"warmd.io/warmd/pkg/peer/seed"
	"warmd.io/warmd/pkg/prefetch"
)

// WarmValues are the values of a model's Node label (models.warmd.io/<model>, written by
// pkg/readiness) that mean the node holds the model's weights verified: "warm", and "weights" (weights
// verified, something else missing). Only such nodes are asked.
var WarmValues = []string{string(nodelabels.StateWarm), string(nodelabels.StateWeights)}

// PartialValues are the values of a model's Node label that leave its download possibly in flight:
// such a node may serve the files it verified so far (Options.Partial), and says which when asked.
var PartialValues = []string{string(nodelabels.StateCold), string(nodelabels.StateImage)}

// Find returns the base URLs (http://InternalIP:port) of up to k nodes other than self whose label
// labelKey says they hold the model's weights verified, in random order so a node group spreads its
// load over every warm node rather than the first k.
func Find(ctx context.Context, c kube.Interface, labelKey, self string, port string, k int) ([]string, error) {
	return find(ctx, c, labelKey, self, port, k, "", WarmValues)
}

// find is Find reading the Nodes at resourceVersion rv: "" is a consistent read (the first look, which
// decides whether to wait for a seed); "0" is served from the API server's watch cache, which is what
// the lookups repeated during a fetch use, so they cost the API server no etcd read.
// values are the label values asked for (WarmValues, PartialValues).
func find(ctx context.Context, c kube.Interface, labelKey, self, port string, k int, rv string, values []string) ([]string, error) {
	sel := fmt.Sprintf("%s in (%s)", labelKey, strings.Join(values, ","))
	return discover.Peers(ctx, c, sel, self, port, k, rv, nil)
}

// seedLease is how long a seed Lease stays its holder's without a renewal (a variable for tests):
// a seed that dies costs the nodes waiting for it about this long.
var seedLease = seed.DefaultDuration

// findOrWait returns warm peers, waiting up to wait (polling every poll) while another node holds the
// model revision's seed Lease and no peer is warm yet. It returns no peers, and no error, when this
// node took the Lease (it is the seed and reads the origin) or the wait ran out. The first node that
// asks is the seed: nodes that start together do not wait for each other's labels to appear. While it
// waits, serving reports whether a node still downloading (the seed, mostly) serves files it verified
// already: then the wait ends, and the fetch reads those files from it (the rest waits for them there,
// under the same seed rule, see Source.fromPeers). nil: no such node is asked.
func findOrWait(ctx context.Context, c kube.Interface, labelKey, self, port string, k int, lease Seeder, wait, poll time.Duration,
	serving func(context.Context) bool, log *slog.Logger) ([]string, error) {
	deadline := time.Now().Add(wait)
	waitingFor := ""
	for {
		peers, err := Find(ctx, c, labelKey, self, port, k)
		if err != nil || len(peers) > 0 {
			return peers, err
		}
		held, holder, err := lease.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("no warm peer, and the seed Lease cannot be read or taken (check warmd's RBAC for leases in its namespace): %w", err)
		}
		if held {
			if waitingFor != "" {
				log.Info("the seed stopped renewing its Lease: this node reads the origin now", "seed", waitingFor)
			}
			return nil, nil
		}
		if serving != nil && serving(ctx) {
			log.Info("no warm peer yet, but the seed serves the files it verified: reading them while it downloads the rest", "seed", holder)
			return nil, nil
		}
		if time.Now().After(deadline) {
			log.Warn("no warm peer after the seed wait: reading the origin beside the seed", "seed", holder, "wait", wait)
			return nil, nil
		}
		if holder != "" && holder != waitingFor {
			log.Info("no warm peer yet: waiting while the seed fetches from the origin", "seed", holder, "wait", wait)
			waitingFor = holder
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
func Wrap(open func(context.Context, config.Model) (prefetch.Source, error), c kube.Interface, cfg *config.NodeConfig,
	m *metrics.Peers, log *slog.Logger) func(context.Context, config.Model) (prefetch.Source, error) {
	if !cfg.Peers.Enabled || c == nil {
		return open
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("part", "weights")
	_, port, _ := net.SplitHostPort(cfg.Peers.Listen)
	ns, _, _ := strings.Cut(cfg.Peers.ServiceAccount, "/") // warmd's own namespace (validated namespace/name)
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
		// One Lease per model revision in warmd's own namespace names the node that reads the origin
		// while no peer can serve it (pkg/peer/seed).
		lease := seed.New(c, ns, md.Name, md.Revision, cfg.NodeName, seedLease)
		// Found at the first chunk, not now: a model already published is never fetched, so its
		// node never waits for a seed. Without peers the source still counts every byte as the origin's.
		var src *Source // serving asks it which nodes still downloading hold files (partial.go)
		serving := func(ctx context.Context) bool { return src.probe(ctx, 0) }
		discover := func(ctx context.Context) ([]string, error) {
			return findOrWait(ctx, c, keys[md.Name], cfg.NodeName, port, cfg.Peers.MaxPeers, lease, cfg.Peers.SeedWait.Duration, 2*time.Second, serving, log)
		}
		// During the fetch, every warm peer is a candidate (in random order); the source adds the new
		// ones it can use.
		refresh := func(ctx context.Context) ([]string, error) {
			return find(ctx, c, keys[md.Name], cfg.NodeName, port, maxFound, "0", WarmValues)
		}
		// Nodes of the same wave serve the files they verified before they are warm.
		partial := func(ctx context.Context) ([]string, error) {
			return find(ctx, c, keys[md.Name], cfg.NodeName, port, maxPartialProbe, "0", PartialValues)
		}
		// A chunk every warm peer turned away busy waits for a slot; after busyGrace it goes to the
		// origin if this node holds the seed Lease: one node of a group reads the origin at a time, as
		// at the start (docs/fleet.md).
		o := Options{Origin: origin, Model: md.Name, Revision: md.Revision, Discover: discover, Refresh: refresh, Partial: partial,
			RefreshEvery: refreshEvery, Seed: lease, ReleaseAfter: seedLease, BusyGrace: busyGrace(cfg.Peers.SeedWait.Duration), BusyWait: cfg.Peers.SeedWait.Duration, MaxPeers: cfg.Peers.MaxPeers,
			Node: cfg.NodeName, Token: tf.Token, Stall: cfg.Peers.StallTimeout.Duration, Log: log}
		if m != nil { // nil in tests that build the opener alone
			o.OnBytes = func(from string, n int64) { m.FetchedBytes.WithLabelValues(md.Name, from).Add(float64(n)) }
			o.OnDrop = func(_, reason string) { m.Dropped.WithLabelValues(reason).Inc() }
		}
		src = New(o)
		return src, nil
	}
}
