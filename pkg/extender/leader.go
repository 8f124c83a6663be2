package extender

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
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
	// LeaseDuration, RenewDeadline, RetryPeriod: client-go's (15s, 10s, 2s when zero). A lost
	// leader's series stop at once; the next replica's start within about LeaseDuration (at once on a
	// clean shutdown, which releases the Lease).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Run campaigns for the Lease until ctx ends, re-campaigning after losing it. Without election it
// returns at once.
func (l *Leader) Run(ctx context.Context, cs kubernetes.Interface, o LeaseOptions, log *slog.Logger) error {
	if !l.elect {
		return nil
	}
	if o.Namespace == "" || o.Name == "" || o.Identity == "" {
		return fmt.Errorf("leader election needs a namespace, lease name and identity (set --leader-elect-namespace or POD_NAMESPACE)")
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: true, Name: o.Name,
			LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					l.leader.Store(true)
					log.Info("extender: leading; exporting the cluster-wide series", "lease", o.Namespace+"/"+o.Name, "identity", o.Identity)
				},
				OnStoppedLeading: func() {
					l.leader.Store(false)
					log.Info("extender: not leading; cluster-wide series left to the leader", "lease", o.Namespace+"/"+o.Name, "identity", o.Identity)
				},
				OnNewLeader: func(id string) {
					if id != o.Identity {
						log.Info("extender: another replica leads", "lease", o.Namespace+"/"+o.Name, "leader", id)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election %s/%s: %w", o.Namespace, o.Name, err)
		}
		le.Run(ctx) // returns when leadership is lost or ctx ends
	}
	return nil
}
