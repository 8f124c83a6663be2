package phases

import (
	"fmt"
	"time"

	"warmd.io/warmd/pkg/state"
)

// Record is one vLLM start seen on this node: which container, what it served, on which GPU SKU, and
// what its log says. Other parts read it: pkg/cache checks Result.CompileCache (and CompileCacheHash)
// after a restore, readiness predicts time-to-ready from the phase seconds.
type Record struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	PodUID    string `json:"podUID"`
	Container string `json:"container"`
	// Restart is the kubelet's restart count: the N of N.log.
	Restart int `json:"restart"`
	// Model is the model name as configured (bounded, used as a metric label); Result.Model is what vLLM printed.
	Model string `json:"model"`
	// Image is the container's image when the API server said so (empty otherwise).
	Image  string `json:"image,omitempty"`
	GPUSKU string `json:"gpuSKU"`
	// Log is the container log file the start was read from.
	Log      string    `json:"log"`
	Recorded time.Time `json:"recorded"`
	Result   Result    `json:"result"`
}

// Key identifies one container start; a start is recorded once even across warmd restarts.
func (r *Record) Key() string {
	return StartKey(r.Namespace, r.Pod, r.PodUID, r.Container, r.Restart)
}

// StartKey builds Record.Key from its parts.
func StartKey(ns, pod, uid, container string, restart int) string {
	return fmt.Sprintf("%s/%s/%s/%s/%d", ns, pod, uid, container, restart)
}

// CompileCacheHit says whether this start loaded its compiled graphs from the cache.
func (r *Record) CompileCacheHit() bool { return r.Result.CompileCache == CacheHit }

// Section is the phases section of the node state, published by pkg/phases/follow.
var Section = state.NewKey[Status]("phases")

// Status is the phases section of /v1/status (Section).
type Status struct {
	PodLogDir string `json:"podLogDir"`
	// Following counts vLLM container logs being read now (starts not yet recorded).
	Following int `json:"following"`
	// Records are the kept starts, newest first.
	Records  []Record `json:"records"`
	Problems []string `json:"problems,omitempty"`
}
