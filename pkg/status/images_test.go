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
		{"layers of a pull in progress, one row each", prefetch.ImagesStatus{Backend: cd, Images: []prefetch.ImageStatus{{
			Ref: "vllm/vllm-openai:v0.11.0", State: prefetch.StateUnpacking, Layers: 3, Unpacked: []prefetch.LayerReport{
				{Digest: "sha256:aaaaaaaaaaaaaaaaaaaa", Bytes: 2 << 30, From: "registry", FetchSeconds: 12.25,
					LayerUnpack: prefetch.LayerUnpack{By: "warmd", Decoder: "gzip-warmd-indexed", Index: "used", Inflated: 4 << 30, Seconds: 8.5}},
				{Digest: "sha256:bbbbbbbbbbbbbbbbbbbb", Bytes: 1 << 20, From: "registry", FetchSeconds: 1,
					LayerUnpack: prefetch.LayerUnpack{By: "daemon", Seconds: 0.5}},
			}}}}, []string{"2 of 3 layer(s) unpacked", "sha256:aaaaaaaaaaaa  2.0 GiB  registry  12.2s", "warmd   gzip-warmd-indexed  used   4.0 GiB   8.5s", "daemon  -                   -      -         0.5s"}},
		{"a ready image's last pull in one line", prefetch.ImagesStatus{Backend: cd, Images: []prefetch.ImageStatus{{
			Ref: "x:v1", State: prefetch.StateReady, Layers: 2, Unpacked: []prefetch.LayerReport{
				{Digest: "sha256:aa", LayerUnpack: prefetch.LayerUnpack{By: "warmd", Decoder: "gzip-warmd", Index: "built", Inflated: 1 << 30, Seconds: 3}},
				{Digest: "sha256:bb", LayerUnpack: prefetch.LayerUnpack{By: "warmd", Decoder: "zstd", Inflated: 1 << 30, Seconds: 1}},
			}}}}, []string{"x:v1: last pull unpacked 2 layer(s) (1 gzip-warmd, 1 zstd), 2.0 GiB inflated, 4.0s applying"}},
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
