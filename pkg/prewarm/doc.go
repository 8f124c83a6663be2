// Package prewarm reads a model's published weights into the page cache while a vLLM pod for that
// model starts on this node. warmd publishes weights with O_DIRECT (pkg/prefetch/weights), so the
// page cache holds none of them, and vLLM's loader would then read tens of GB from disk after its
// container started and Python imported — 20-30 s in which the disk sits idle. Reading the files
// during those seconds turns the loader's reads into memory copies.
//
// It owns two things: the budgeted reader (Warm: a published snapshot, a byte budget, a context that
// stops it), which needs no Kubernetes, and the daemon part (Part) that watches the Pods bound to
// this node and starts a pre-warm for each starting vLLM pod's model, cancelling it when the pod goes
// away. It never writes below the data dir, never reads from staging, and never follows a link out
// of the model's blobs/ dir: every file is opened through pkg/fsroot.
//
// The budget is the smaller of a configured cap and a share of MemAvailable: pre-warming more than
// the node can keep cached only evicts what was read first (or what running pods need).
package prewarm
