package extender

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"warmd.io/warmd/pkg/kube"
)

// Leader decides which extender replica exports the cluster-wide series (warmd_warm_nodes,
// warmd_cluster_fastest_ready_seconds, warmd_vllm_*): every replica sees the same Nodes, so if each
// exported them a sum() over replicas would count every Node twice. With election on, only the
// replica holding the Lease exports them and sum() is right; every replica still answers the
// scheduler (answers need no coordination). A Leader that never runs an election (election off)
// always exports.
type Leader struct {
	elect  bool
	leader atomic.Bool
}

// NewLeader returns a Leader; with elect false it is the leader from the start.
func NewLeader(elect bool) *Leader {
	l := &Leader{elect: elect}
	l.leader.Store(!elect)
	return l
}

// IsLeader reports whether this replica exports the cluster-wide series now.
func (l *Leader) IsLeader() bool { return l.leader.Load() }

// LeaseOptions name the Lease and this replica.
type LeaseOptions struct {
	Namespace, Name, Identity string
	// LeaseDuration, RenewDeadline, RetryPeriod: client-go's leader election's (15s, 10s, 2s when
	// zero). The holder renews every RetryPeriod and stops exporting once it could not for
	// RenewDeadline; the next replica's series start within about LeaseDuration (at once on a clean
	// shutdown, which releases the Lease).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Run campaigns for the Lease until ctx ends (kube.Lease, every RetryPeriod), re-campaigning after
// losing it, and releases it when ctx ends. Without election it returns at once.
func (l *Leader) Run(ctx context.Context, cs kube.Interface, o LeaseOptions, log *slog.Logger) error {
	if !l.elect {
		return nil
	}
	if o.Namespace == "" || o.Name == "" || o.Identity == "" {
		return fmt.Errorf("leader election needs a namespace, lease name and identity (set --leader-elect-namespace or POD_NAMESPACE)")
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	lease := kube.NewLease(cs, o.Namespace, o.Name, o.Identity, "extender leader", nil, o.LeaseDuration)
	name := o.Namespace + "/" + o.Name
	var renewed time.Time // the last successful renewal while leading
	seen := ""            // the other leader last logged
	stop := func(why string) {
		if l.leader.Swap(false) {
			log.Info("extender: not leading; cluster-wide series left to the leader", "lease", name, "identity", o.Identity, "why", why)
		}
	}
	tick := time.NewTicker(o.RetryPeriod)
	defer tick.Stop()
	for {
		// One attempt is bounded by the renew deadline, as client-go's elector bounds its renewal:
		// a hung API server cannot keep a leader that can no longer renew.
		actx, acancel := context.WithTimeout(ctx, o.RenewDeadline)
		held, holder, err := lease.Acquire(actx)
		acancel()
		now := time.Now()
		switch {
		case ctx.Err() != nil:
		case err != nil:
			log.Warn("extender: lease", "lease", name, "err", err)
			if l.leader.Load() && now.Sub(renewed) > o.RenewDeadline {
				stop("could not renew the lease within its renew deadline")
			}
		case held:
			renewed = now
			if !l.leader.Swap(true) {
				log.Info("extender: leading; exporting the cluster-wide series", "lease", name, "identity", o.Identity)
			}
		default:
			stop("another replica holds the lease")
			if holder != seen {
				seen = holder
				log.Info("extender: another replica leads", "lease", name, "leader", holder)
			}
		}
		select {
		case <-ctx.Done():
			stop("stopping")
			// Released on a clean shutdown, so the next replica leads at once rather than after
			// the lease's duration.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.RenewDeadline)
			defer cancel()
			if err := lease.Release(rctx); err != nil {
				log.Warn("extender: release the lease", "lease", name, "err", err)
			}
			return nil
		case <-tick.C:
		}
	}
}
