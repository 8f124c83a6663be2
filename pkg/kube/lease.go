package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Lease is one holder's view of one coordination.k8s.io/v1 Lease: the peer seed's per model revision
// (pkg/peer/seed) and the extender's (pkg/extender, leader.go). Expiry is judged by the local clock
// from when this holder saw the Lease last change (as client-go's leader election does), never by
// comparing another holder's renewTime with this clock, so clock skew cannot hand it to two holders.
// It is safe for concurrent use.
type Lease struct {
	c                   Interface
	ns, name, holder    string
	what                string            // what the Lease is for, in errors
	labels              map[string]string // set when this holder creates it
	dur                 time.Duration
	now                 func() time.Time
	mu                  sync.Mutex
	ours                bool      // this holder wrote the Lease as its own last
	renewed             time.Time // when it did
	seenVersion, seenBy string    // the Lease as last seen: resourceVersion and holder
	seenAt              time.Time // when that version was first seen (local clock)
}

// NewLease returns holder's view of Lease ns/name, which stays its holder's for dur without a
// renewal; what names its purpose in errors, labels are set when this holder creates it.
func NewLease(c Interface, ns, name, holder, what string, labels map[string]string, dur time.Duration) *Lease {
	return &Lease{c: c, ns: ns, name: name, what: what, labels: labels, holder: holder, dur: dur, now: time.Now}
}

// Acquire takes the Lease when it does not exist, has no holder or has not changed for its
// duration, renews it when it is already this holder's, and reports whether this holder holds it now and
// who does otherwise. A conflict (another holder wrote it first) is not an error: that node holds it.
func (l *Lease) Acquire(ctx context.Context) (held bool, holder string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	leases := l.c.CoordinationV1().Leases(l.ns)
	cur, err := leases.Get(ctx, l.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, l.record(nil), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, "", nil // another holder created it first; the next look names it
		}
		if err != nil {
			return false, "", fmt.Errorf("lease %s/%s (%s): create: %w", l.ns, l.name, l.what, err)
		}
		l.ours, l.renewed = true, l.now()
		return true, l.holder, nil
	}
	if err != nil {
		return false, "", fmt.Errorf("lease %s/%s (%s): get: %w", l.ns, l.name, l.what, err)
	}
	by := ""
	if cur.Spec.HolderIdentity != nil {
		by = *cur.Spec.HolderIdentity
	}
	now := l.now()
	if cur.ResourceVersion != l.seenVersion {
		l.seenVersion, l.seenBy, l.seenAt = cur.ResourceVersion, by, now
	}
	if by != "" && by != l.holder && now.Sub(l.seenAt) < l.dur {
		l.ours = false
		return false, by, nil
	}
	if _, err := leases.Update(ctx, l.record(cur), metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return false, by, nil // another holder renewed or took it meanwhile
		}
		return false, by, fmt.Errorf("lease %s/%s (%s): update: %w", l.ns, l.name, l.what, err)
	}
	l.ours, l.renewed = true, now
	return true, l.holder, nil
}

// record is the Lease as this holder writes it: cur (nil: a new one) with this holder as the holder,
// renewed now, its acquire time and transitions kept while it stays this holder's.
func (l *Lease) record(cur *coordv1.Lease) *coordv1.Lease {
	now := metav1.NewMicroTime(l.now())
	secs := int32(max(1, (l.dur+time.Second-1)/time.Second))
	rec := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.ns,
		Labels: l.labels}}
	if cur != nil {
		rec = cur.DeepCopy()
	}
	if rec.Spec.HolderIdentity == nil || *rec.Spec.HolderIdentity != l.holder {
		rec.Spec.AcquireTime = &now
		if rec.Spec.LeaseTransitions == nil {
			rec.Spec.LeaseTransitions = new(int32)
		}
		if cur != nil {
			*rec.Spec.LeaseTransitions++
		}
	}
	rec.Spec.HolderIdentity = &l.holder
	rec.Spec.LeaseDurationSeconds = &secs
	rec.Spec.RenewTime = &now
	return rec
}

// Renew renews the Lease when this holder holds it and its last renewal is a third of the duration
// old; otherwise it does nothing. The fetch calls it as it reads the origin, so the Lease stays the
// reader's exactly while it reads. It returns Acquire's error.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	due := l.ours && l.now().Sub(l.renewed) >= l.dur/3
	l.mu.Unlock()
	if !due {
		return nil
	}
	_, _, err := l.Acquire(ctx)
	return err
}

// Held reports whether this holder holds the Lease as of its last write (no API call).
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ours && l.now().Sub(l.renewed) < l.dur
}

// errNotOurs is Release's answer when another holder took the Lease: nothing to give up.
var errNotOurs = errors.New("not this holder's")

// Release gives the Lease up when this holder holds it, so a node waiting for it takes it at once
// rather than after its duration: the holder's fetch ended (published, failed or stopped).
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ours {
		return nil
	}
	l.ours = false
	leases := l.c.CoordinationV1().Leases(l.ns)
	cur, err := leases.Get(ctx, l.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil && (cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != l.holder) {
		err = errNotOurs
	}
	if err == nil {
		rec := cur.DeepCopy()
		rec.Spec.HolderIdentity = nil
		_, err = leases.Update(ctx, rec, metav1.UpdateOptions{})
	}
	if errors.Is(err, errNotOurs) || apierrors.IsConflict(err) {
		return nil // another holder took it meanwhile: not ours to give up
	}
	if err != nil {
		return fmt.Errorf("lease %s/%s (%s): release: %w", l.ns, l.name, l.what, err)
	}
	return nil
}
