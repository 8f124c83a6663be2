package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/prefetch"
)

func TestWriteImages(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cd := prefetch.BackendInfo{Name: "containerd", Path: "pull", Detail: "containerd 1.6.20 at /run/containerd/containerd.sock"}
	tests := []struct {
		name string
		in   prefetch.ImagesStatus
		want []string
	}{
		{"backend and pulling progress", prefetch.ImagesStatus{Backend: cd, Images: []prefetch.ImageStatus{{
			Ref: "vllm/vllm-openai:v0.11.0", Models: []string{"Qwen/Qwen2.5-7B"}, State: prefetch.StatePulling,
			Layer: 2, Layers: 5, Bytes: 120 << 20, TotalBytes: 500 << 20, Attempt: 2, Updated: now.Add(-3 * time.Second),
		}}}, []string{"IMAGES via containerd (pull API)", "pulling layer 2/5 (120.0 MiB / 500.0 MiB), attempt 2", "Qwen/Qwen2.5-7B", "3s ago"}},
		{"ready and pinned with a short digest", prefetch.ImagesStatus{Backend: cd, Images: []prefetch.ImageStatus{{
			Ref: "x:v1", State: prefetch.StateReady, Pinned: true, Digest: "sha256:0123456789abcdef0123",
		}}}, []string{"ready", "true", "sha256:0123456789ab"}},
		{"failure reason is shown", prefetch.ImagesStatus{Backend: cd, Images: []prefetch.ImageStatus{{
			Ref: "gone:v1", State: prefetch.StateFailed, Reason: "failed after 5 attempt(s): connection refused",
		}}}, []string{"FAILED", "gone:v1: failed after 5 attempt(s): connection refused"}},
		{"no backend", prefetch.ImagesStatus{Error: "containerd at /run/containerd/containerd.sock does not answer"},
			[]string{"IMAGES: no backend - containerd at", "(no images wanted on this node)"}},
		{"embedded backend is named", prefetch.ImagesStatus{Backend: prefetch.BackendInfo{Name: "embedded", Path: "embedded", Detail: "embedded content store at /var/lib/warmd/images"}},
			[]string{"IMAGES via embedded (embedded API): embedded content store"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteImages(&buf, tc.in, now); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, buf.String())
				}
			}
		})
	}
}
