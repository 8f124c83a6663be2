package check

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"warmd.io/warmd/pkg/compilekey"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/prefetch"
)

// TestTagResolvedThroughWarmImage: a pod naming its image by tag is compared by the digest warmd
// pulled and pinned for that tag; while a moved tag's new digest is being pulled, the image is
// unknown (no hit guessed). reconcile needs no API server: it works on listed pods.
func TestTagResolvedThroughWarmImage(t *testing.T) {
	const node, tag, digest = "n1", "vllm/vllm-openai:v0.11.0", "sha256:aaaa"
	newPart := func() *Part {
		return &Part{log: slog.New(slog.DiscardHandler), metrics: metrics.New(prometheus.NewRegistry()).CompileKey, node: node,
			opts: Options{SKU: func() string { return "sku" }}, path: filepath.Join(t.TempDir(), "state", tableFile),
			pending: map[string]*Check{}, counts: map[string]int{}}
	}
	pod := func(name string, running bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "vllm", Image: tag,
				Command: []string{"vllm", "serve", "org/m"}, Env: []corev1.EnvVar{{Name: "VLLM_USE_V1", Value: "1"}}}}}}
		if running {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "vllm", ImageID: "docker.io/vllm/vllm-openai@" + digest,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		}
		return p
	}
	old := pod("old", true)
	recs := []phases.Record{{Namespace: "ml", Pod: "old", PodUID: "uid-old", Container: "vllm", GPUSKU: "sku", Recorded: time.Now(),
		Result: phases.Result{VLLMVersion: "0.11.0", CompileCache: phases.CacheMiss, CompileCacheHash: "0123456789"}}}
	for _, tc := range []struct {
		name   string
		images prefetch.ImagesStatus
		want   compilekey.Outcome
	}{
		{"warm tag", prefetch.ImagesStatus{Images: []prefetch.ImageStatus{{Ref: tag, Digest: digest, Pinned: true}}}, compilekey.Hit},
		{"moved tag", prefetch.ImagesStatus{Images: []prefetch.ImageStatus{{Ref: tag, Digest: digest, Pinned: true, Pending: "sha256:bbbb"}}}, compilekey.Unknown},
		{"not pulled by warmd", prefetch.ImagesStatus{}, compilekey.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPart()
			if !p.reconcile([]*corev1.Pod{old, pod("new", false)}, recs, tc.images) {
				t.Fatal("nothing changed")
			}
			st := p.Status()
			if st.Cached != 1 || len(st.Pending) != 1 || st.Pending[0].Predicted != tc.want {
				t.Fatalf("status %+v, want one %s", st, tc.want)
			}
		})
	}
}
