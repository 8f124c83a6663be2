package daemon

import (
	corev1 "k8s.io/api/core/v1"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/podwatch"
)

// NodeView is this node's Node object as the parts read it: which configured models the node wants
// (the models' nodeSelectors against its labels), the Node itself for the readiness writer, and
// callbacks when either changes. Deps holds it as this interface so a part is built, and tested,
// without a watch of its own; pkg/nodewatch's Watcher is the one implementation the daemon runs
// (nodewatch.Off without an API server).
type NodeView interface {
	// Wanted reports whether the node wants m now; until the Node is read only models without a
	// nodeSelector are wanted (OnLabels tells when to ask again).
	Wanted(m config.Model) bool
	// OnLabels registers f, called after every change of the Node's labels.
	OnLabels(f func())
	// OnNode registers f, called with every new version of the Node.
	OnNode(f func(*corev1.Node))
	// Labels returns a copy of the Node's labels (empty before it is read).
	Labels() map[string]string
	// Synced is closed once the first list of the Node has arrived.
	Synced() <-chan struct{}
	// Changed is closed at the next change of the Node.
	Changed() <-chan struct{}
}

// PodWatch is this node's one watch of the pods bound to it (pkg/podwatch's Watcher): a part that
// reads pods subscribes while it runs and closes the subscription when it stops, so the API server
// serves one watch per node however many parts read pods.
type PodWatch interface {
	Subscribe() (podwatch.Subscription, error)
}
