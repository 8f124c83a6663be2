package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
)

// EnvImagesWorld names the dir in which TestImageFromAWarmPeer, as `make bench-images`' world for its
// warmd_peer arm, writes the fresh node's config (fresh.yaml) and then "ready", and holds the warm
// node up until "stop" appears there. EnvImagesRef is the image it warms (the bench's).
const (
	EnvImagesWorld = "WARMD_IMAGES_WORLD"
	EnvImagesRef   = "WARMD_IMAGES_REF"
)

// TestImageFromAWarmPeer: a warm node (`warmd run` on its own containerd 2.4.2, which pulls, unpacks
// and pins the model's image and labels its Node itself) serves the image's layers; a fresh node's
// `warmd prefetch images` with peers.enabled finds it through the real API server, passes its
// TokenReview and takes every layer from it, and the image is unpacked and pinned there.
func TestImageFromAWarmPeer(t *testing.T) {
	world := os.Getenv(EnvImagesWorld)
	w := newWorld(t, 1<<20)
	ref, layers := os.Getenv(EnvImagesRef), 0
	if world == "" {
		reg := testenv.Require(t, testenv.EnvRegistry, "the test registry")
		ref = fmt.Sprintf("%s/warmd-fleet/image-peer:%d", reg, time.Now().UnixNano())
		layers = 3
		if _, err := fixtures.PushRandomImage(ref, 4<<20, int64(layers)); err != nil {
			t.Fatal(err)
		}
	} else if ref == "" {
		t.Fatalf("%s is set without %s", EnvImagesWorld, EnvImagesRef)
	}
	warm := testenv.StartContainerd(t)
	spec := func(socket string, peers bool) nodeSpec {
		return nodeSpec{peers: peers, image: ref,
			containerd: fmt.Sprintf("{address: %s, backend: containerd, unpack: warmd}", socket)}
	}
	w.start("warm", 10, spec(warm.Socket, true)) // 127.0.0.20
	waitImageLabel(t, w, "warm-10", 30*time.Minute)

	if world != "" {
		// The bench's fresh node: the testenv's daemon, which the other arms pull into.
		dataDir := filepath.Join(world, "fresh")
		os.MkdirAll(dataDir, 0o755)
		cfg := w.writeConfig("fresh", dataDir, "127.0.0.21", spec(testenv.Require(t, testenv.EnvContainerd, "containerd"), true))
		if err := os.Rename(cfg, filepath.Join(world, "fresh.yaml")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(world, "ready"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("warm peer up; the bench's fresh node config is %s/fresh.yaml", world)
		for deadline := time.Now().Add(3 * time.Hour); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(world, "stop")); err == nil {
				return
			}
		}
		t.Fatal("the bench did not stop the world within 3h")
	}

	fresh := testenv.StartContainerd(t)
	dataDir := filepath.Join(w.root, "fresh")
	os.MkdirAll(dataDir, 0o755)
	cfg := w.writeConfig("fresh", dataDir, "127.0.0.21", spec(fresh.Socket, true))
	out, err := exec.Command(warmdBin, "prefetch", "images", "--config", cfg, "--progress", "none", "--log-level", "info").CombinedOutput()
	if err != nil {
		t.Fatalf("warmd prefetch images: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "layer taken from peers"); n != layers {
		t.Errorf("%d layers taken from the warm peer, want all %d:\n%s", n, layers, out)
	}
	assertPinned(t, string(out), ref)
}

// waitImageLabel waits until the Node's label for the model says its image is there (warm, or image).
func waitImageLabel(t *testing.T, w *world, node string, timeout time.Duration) {
	t.Helper()
	key := model.LabelKey(modelName)
	for deadline := time.Now().Add(timeout); ; time.Sleep(500 * time.Millisecond) {
		n, err := w.kube.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil {
			switch v := n.Labels[key]; v {
			case string(nodelabels.StateWarm), string(nodelabels.StateImage):
				return
			case string(nodelabels.StateFailed):
				t.Fatalf("%s: %s=%s", node, key, v)
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(w.root, node+".log"))
			t.Fatalf("%s: no image label after %s (last error %v); its log:\n%s", node, timeout, err, log)
		}
	}
}

// assertPinned finds ref's row in `warmd prefetch images`' summary and wants it pinned.
func assertPinned(t *testing.T, out, ref string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == ref {
			if f[2] != "true" {
				t.Errorf("%s: pinned %s, want true:\n%s", ref, f[2], out)
			}
			return
		}
	}
	t.Errorf("%s not in the summary:\n%s", ref, out)
}
