// Package seed names, per model revision, the one node that reads the origin for it while no peer
// can serve it: a coordination.k8s.io/v1 Lease in warmd's namespace, taken by the first node that
// asks, renewed while that node reads the origin, released when its fetch ends and taken over by
// another node when its holder stops renewing (it died, or it reads from peers now). A node group
// that starts together thus reads the origin once, at once: no node waits for the group's labels to
// appear to find out which of them sorts first by name (the settle this replaced), and two nodes that
// start seconds apart cannot both decide they are the seed, since the API server lets only one
// create or update the Lease from a given version.
//
// Expiry is judged by the local clock from when this node saw the Lease last change (as client-go's
// leader election does), never by comparing another node's renewTime with this node's clock, so
// clock skew between nodes cannot hand the Lease to two of them.
package seed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultDuration is how long a Lease stays its holder's without a renewal: a holder renews every
// third of it while it reads, so a dead holder costs the nodes waiting for it about this long.
const DefaultDuration = 15 * time.Second

// LabelPart marks warmd's seed Leases (app.kubernetes.io/part-of=warmd), so an operator can list them.
const LabelPart = "app.kubernetes.io/part-of"

// Name is the Lease's name for a model revision: a hash, since model names carry '/' and upper case
// that a Lease name may not, and any length.
func Name(model, revision string) string {
	h := sha256.Sum256([]byte(model + "\x00" + revision))
	return "warmd-seed-" + hex.EncodeToString(h[:10])
}

// Lease is one node's view of one model revision's seed Lease. It is safe for concurrent use (the
// chunk workers of one fetch share it).
type Lease struct {
	c                   kubernetes.Interface
	ns, name, holder    string
	model               string
	dur                 time.Duration
	now                 func() time.Time
	mu                  sync.Mutex
	ours                bool      // this node wrote the Lease as its own last
	renewed             time.Time // when it did
	seenVersion, seenBy string    // the Lease as last seen: resourceVersion and holder
	seenAt              time.Time // when that version was first seen (local clock)
}

// New returns node holder's view of the seed Lease of model at revision in namespace ns.
func New(c kubernetes.Interface, ns, model, revision, holder string, dur time.Duration) *Lease {
	if dur <= 0 {
		dur = DefaultDuration
	}
	return &Lease{c: c, ns: ns, name: Name(model, revision), model: model, holder: holder, dur: dur, now: time.Now}
}

// Acquire takes the Lease when it does not exist, has no holder or has not changed for its
// duration, renews it when it is already this node's, and reports whether this node holds it now and
// who does otherwise. A conflict (another node wrote it first) is not an error: that node holds it.
func (l *Lease) Acquire(ctx context.Context) (held bool, holder string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	leases := l.c.CoordinationV1().Leases(l.ns)
	cur, err := leases.Get(ctx, l.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, l.record(nil), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, "", nil // another node created it first; the next look names it
		}
		if err != nil {
			return false, "", fmt.Errorf("seed lease %s/%s for %s: create: %w", l.ns, l.name, l.model, err)
		}
		l.ours, l.renewed = true, l.now()
		return true, l.holder, nil
	}
	if err != nil {
		return false, "", fmt.Errorf("seed lease %s/%s for %s: get: %w", l.ns, l.name, l.model, err)
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
			return false, by, nil // another node renewed or took it meanwhile
		}
		return false, by, fmt.Errorf("seed lease %s/%s for %s: update: %w", l.ns, l.name, l.model, err)
	}
	l.ours, l.renewed = true, now
	return true, l.holder, nil
}

// record is the Lease as this node writes it: cur (nil: a new one) with this node as the holder,
// renewed now, its acquire time and transitions kept while it stays this node's.
func (l *Lease) record(cur *coordv1.Lease) *coordv1.Lease {
	now := metav1.NewMicroTime(l.now())
	secs := int32(max(1, (l.dur+time.Second-1)/time.Second))
	rec := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.ns,
		Labels: map[string]string{LabelPart: "warmd"}}}
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

// Renew renews the Lease when this node holds it and its last renewal is a third of the duration
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

// Held reports whether this node holds the Lease as of its last write (no API call).
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ours && l.now().Sub(l.renewed) < l.dur
}

// errNotOurs is Release's answer when another node took the Lease: nothing to give up.
var errNotOurs = errors.New("not this node's")

// Release gives the Lease up when this node holds it, so a node waiting for it takes it at once
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
		return nil // another node took it meanwhile: not ours to give up
	}
	if err != nil {
		return fmt.Errorf("seed lease %s/%s for %s: release: %w", l.ns, l.name, l.model, err)
	}
	return nil
}
