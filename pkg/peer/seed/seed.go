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
	"crypto/sha256"
	"encoding/hex"
	"time"

	"warmd.io/warmd/pkg/kube"
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

// Lease is one node's view of one model revision's seed Lease (kube.Lease: Acquire, Renew, Held,
// Release).
type Lease = kube.Lease

// New returns node holder's view of the seed Lease of model at revision in namespace ns.
func New(c kube.Interface, ns, model, revision, holder string, dur time.Duration) *Lease {
	if dur <= 0 {
		dur = DefaultDuration
	}
	return kube.NewLease(c, ns, Name(model, revision), holder, "seed of "+model, map[string]string{LabelPart: "warmd"}, dur)
}
