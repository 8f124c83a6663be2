// Package readiness owns what warmd tells the cluster about this node: the warm state of every model
// the node should serve (Evaluate), the label, annotation, taint and condition values that state maps
// to (Desired, Labels), and the Node writer that publishes them with server-side apply under the
// field manager "warmd", touching only keys under warmd.io/ and models.warmd.io/ on its own Node.
//
// It fetches nothing: images, weights, compile caches, GPU identity and start measurements are other
// parts' work. They reach this package as one small Input value (built by the daemon from the state
// snapshot), so the warm-state rules are testable without any of those parts.
//
// It does not watch the Node (pkg/nodewatch does; the part is fed every copy) nor build the API
// client (pkg/assemble does, once).
package readiness
