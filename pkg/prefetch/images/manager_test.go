package images_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images"
	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
	"warmd.io/warmd/pkg/state"
	"warmd.io/warmd/pkg/state/statetest"
)

// backend is one place the manager runs against: both real containerd daemons and the embedded store.
type backend struct {
	name     string
	wantPath string
	// configure points cfg at the backend (a socket, or a data dir for embedded).
	configure func(t *testing.T, cfg *config.NodeConfig)
}

var backends = []backend{
	// The default, containerd.unpack: warmd (warmd inflates and untars each layer itself).
	{"containerd-2.4", "warmd", func(t *testing.T, c *config.NodeConfig) {
		c.Containerd.Address, c.Containerd.Backend = testenv.Containerd(t), "containerd"
	}},
	// containerd.unpack: daemon, the daemon's own Transfer unpack.
	{"containerd-2.4-daemon", "transfer", func(t *testing.T, c *config.NodeConfig) {
		c.Containerd.Address, c.Containerd.Backend, c.Containerd.Unpack = testenv.Containerd(t), "containerd", "daemon"
	}},
	// containerd.unpack: parallel, the whole manager suite on warmd's parallel-unpack path.
	{"containerd-2.4-parallel", "parallel", func(t *testing.T, c *config.NodeConfig) {
		c.Containerd.Address, c.Containerd.Backend, c.Containerd.Unpack = testenv.Containerd(t), "containerd", "parallel"
	}},
	{"containerd-1.6", "pull", func(t *testing.T, c *config.NodeConfig) {
		c.Containerd.Address, c.Containerd.Backend = testenv.Containerd16(t), "containerd"
	}},
	{"embedded", "embedded", func(t *testing.T, c *config.NodeConfig) { c.Containerd.Backend = "embedded" }},
}

// track removes everything reg served from a shared daemon when the test ends.
func track(t *testing.T, cfg *config.NodeConfig, reg *imagetest.Registry) {
	if cfg.Containerd.Backend == "containerd" {
		imagetest.CleanupDaemon(t, cfg.Containerd.Address, cfg.Containerd.Namespace, reg)
	}
}

// testNamespace keeps the manager, which releases every managed image it does not want when it
// starts, away from the backend tests that may run at the same time in k8s.io on the shared daemons.
// (The CRI's view is checked by the backend tests, which must use k8s.io.)
const testNamespace = "warmd-imagemgr-test"

func newConfig(t *testing.T, b backend, mut func(*config.NodeConfig)) *config.NodeConfig {
	t.Helper()
	cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: "n1", DataDir: t.TempDir()}
	cfg.Containerd.Namespace = testNamespace
	cfg.ImagePull.ResolveInterval = metav1.Duration{Duration: time.Hour}
	cfg.ImagePull.OnRemove = prefetch.OnRemoveRemove
	b.configure(t, cfg)
	mut(cfg)
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

type harness struct {
	m     *images.Manager
	store *state.Store
	met   *metrics.Metrics
	cfg   *config.NodeConfig
}

// start runs the manager until the test ends, then removes every image it managed.
func start(t *testing.T, cfg *config.NodeConfig, opts images.Options) *harness {
	t.Helper()
	if opts.Backoff == 0 {
		opts.Backoff, opts.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	}
	h := &harness{store: state.New(nil), met: metrics.New(prometheus.NewRegistry()), cfg: cfg}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h.m = images.New(daemon.Deps{Config: cfg, Store: h.store, Metrics: h.met, Log: log}, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		cleanup(cfg)
	})
	return h
}

type stoppable struct {
	h    *harness
	stop func()
}

// startStoppable runs a manager the test stops itself (a warmd restart), leaving images in place.
func startStoppable(t *testing.T, cfg *config.NodeConfig, opts images.Options) stoppable {
	t.Helper()
	opts.Backoff, opts.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	h := &harness{store: state.New(nil), met: metrics.New(prometheus.NewRegistry()), cfg: cfg}
	h.m = images.New(daemon.Deps{Config: cfg, Store: h.store, Metrics: h.met, Log: slog.New(slog.DiscardHandler)}, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.m.Run(ctx) }()
	return stoppable{h: h, stop: func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}}
}

// cleanup removes what the test pulled from the shared daemons.
func cleanup(cfg *config.NodeConfig) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := images.Open(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return
	}
	defer b.Close()
	ls, _ := b.Managed(ctx)
	for _, l := range ls {
		if strings.HasPrefix(l.Name, "127.0.0.1:") {
			_ = b.Release(ctx, l.Name, prefetch.OnRemoveRemove)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ready(ref, digest string) func(prefetch.ImagesStatus) bool {
	return func(s prefetch.ImagesStatus) bool {
		im, ok := s.ForRef(ref)
		return ok && im.State == prefetch.StateReady && im.Warm() && (digest == "" || im.Digest == digest)
	}
}

func TestManager(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Run("wanted models' images and extra images become ready and pinned", func(t *testing.T) {
				reg := imagetest.NewRegistry(t, imagetest.Options{})
				a := reg.PushRandom(t, "warmd-mgr/served:v1", 64<<10, 3)
				reg.PushRandom(t, "warmd-mgr/extra:v1", 32<<10, 1)
				cfg := newConfig(t, b, func(c *config.NodeConfig) {
					c.Models = []config.Model{
						{Name: "org/wanted", Source: "file:///m/", Image: reg.Ref("warmd-mgr/served:v1")},
						{Name: "org/other", Source: "file:///m/", Image: reg.Ref("warmd-mgr/not-here:v1")},
					}
					c.Images = []config.Image{{Ref: reg.Ref("warmd-mgr/extra:v1")}}
				})
				track(t, cfg, reg)
				h := start(t, cfg, images.Options{Wants: func(m config.Model) bool { return m.Name == "org/wanted" }})
				st := statetest.Wait(t, h.store, prefetch.ImagesSection, func(s prefetch.ImagesStatus) bool {
					return ready(reg.Ref("warmd-mgr/served:v1"), "")(s) && ready(reg.Ref("warmd-mgr/extra:v1"), "")(s)
				})
				if st.Backend.Path != b.wantPath {
					t.Errorf("status says path %q, want %q", st.Backend.Path, b.wantPath)
				}
				if len(st.Images) != 2 {
					t.Errorf("status lists %d images, want 2 (the unwanted model's image is not this node's)", len(st.Images))
				}
				im, ok := st.ForModel("org/wanted")
				if !ok || im.Digest != imagetest.Digest(t, a) || !im.Pinned || im.Layers != 3 {
					t.Errorf("image for org/wanted: %+v, want pinned at %s with 3 layers", im, imagetest.Digest(t, a))
				}
				if _, ok := st.ForModel("org/other"); ok {
					t.Error("the unwanted model's image is reported")
				}
				// The paths that apply layers one by one report each layer's unpack, in status and
				// in the per-decoder metrics; the daemon's own pull does not.
				switch b.wantPath {
				case "warmd", "parallel":
					by := map[string]string{"warmd": "warmd", "parallel": "daemon"}[b.wantPath]
					if len(im.Unpacked) != 3 || im.Unpacked[0].By != by || im.Unpacked[0].From != "registry" || im.Unpacked[0].Digest == "" {
						t.Errorf("unpacked layers %+v, want 3 unpacked by %s", im.Unpacked, by)
					}
					dec := map[string]string{"warmd": "gzip-warmd", "parallel": "daemon"}[b.wantPath]
					var m dto.Metric
					if err := h.met.Images.LayerUnpackSeconds.WithLabelValues(dec).(prometheus.Metric).Write(&m); err != nil {
						t.Fatal(err)
					}
					if n := m.GetHistogram().GetSampleCount(); n != 4 { // 3 layers of one image, 1 of the other
						t.Errorf("warmd_image_layer_unpack_seconds{decoder=%q} has %d samples, want 4", dec, n)
					}
				default:
					if len(im.Unpacked) != 0 {
						t.Errorf("unpacked layers %+v on the %s path, which does not report them", im.Unpacked, b.wantPath)
					}
				}
				if n := testutil.ToFloat64(h.met.Images.ByState.WithLabelValues("ready")); n != 2 {
					t.Errorf("warmd_images{state=ready} = %v, want 2", n)
				}
			})

			t.Run("a moved tag is re-pulled; a digest ref never re-resolves", func(t *testing.T) {
				reg := imagetest.NewRegistry(t, imagetest.Options{})
				v1 := reg.PushRandom(t, "warmd-mgr/moving:latest", 32<<10, 2)
				pinned := reg.PushRandom(t, "warmd-mgr/fixed:v1", 32<<10, 1)
				byDigest := reg.Ref("warmd-mgr/fixed@" + imagetest.Digest(t, pinned))
				cfg := newConfig(t, b, func(c *config.NodeConfig) {
					c.Images = []config.Image{{Ref: reg.Ref("warmd-mgr/moving:latest")}, {Ref: byDigest}}
				})
				// Below the config's 10s floor (which a file may not go under), so the test is quick.
				cfg.ImagePull.ResolveInterval = metav1.Duration{Duration: 50 * time.Millisecond}
				track(t, cfg, reg)
				h := start(t, cfg, images.Options{})
				statetest.Wait(t, h.store, prefetch.ImagesSection, ready(reg.Ref("warmd-mgr/moving:latest"), imagetest.Digest(t, v1)))
				statetest.Wait(t, h.store, prefetch.ImagesSection, ready(byDigest, imagetest.Digest(t, pinned)))
				v2 := reg.PushRandom(t, "warmd-mgr/moving:latest", 32<<10, 2)
				st := statetest.Wait(t, h.store, prefetch.ImagesSection, ready(reg.Ref("warmd-mgr/moving:latest"), imagetest.Digest(t, v2)))
				im, _ := st.ForRef(reg.Ref("warmd-mgr/moving:latest"))
				if im.Resolved.IsZero() {
					t.Error("no resolve time recorded")
				}
				bk, err := images.Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				defer bk.Close()
				l, err := bk.Lookup(t.Context(), im.Name)
				if err != nil || l.Digest.String() != imagetest.Digest(t, v2) || !l.Pinned || !l.Unpacked {
					t.Errorf("after the tag moved the backend holds %+v (%v), want v2 pinned and unpacked", l, err)
				}
				dim, _ := st.ForRef(byDigest)
				if !dim.Resolved.IsZero() && dim.Resolved.After(im.Resolved) {
					t.Errorf("the digest ref was resolved again at %s", dim.Resolved)
				}
			})

			t.Run("registry down: retries, then a clear failure", func(t *testing.T) {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				down := l.Addr().String() + "/warmd-mgr/gone:v1"
				l.Close() // nothing listens there now
				cfg := newConfig(t, b, func(c *config.NodeConfig) { c.Images = []config.Image{{Ref: down}} })
				h := start(t, cfg, images.Options{Attempts: 3})
				st := statetest.Wait(t, h.store, prefetch.ImagesSection, func(s prefetch.ImagesStatus) bool {
					im, ok := s.ForRef(down)
					return ok && im.State == prefetch.StateFailed
				})
				im, _ := st.ForRef(down)
				if !strings.Contains(im.Reason, "failed after 3 attempt(s)") || !strings.Contains(im.Reason, "connection refused") {
					t.Errorf("reason %q: want the attempt count and the cause", im.Reason)
				}
				if im.Warm() {
					t.Error("a failed image is reported warm")
				}
			})

			t.Run("a warmd restart keeps a warm image ready even with the registry down", func(t *testing.T) {
				reg := imagetest.NewRegistry(t, imagetest.Options{})
				img := reg.PushRandom(t, "warmd-mgr/kept:v1", 32<<10, 2)
				cfg := newConfig(t, b, func(c *config.NodeConfig) { c.Images = []config.Image{{Ref: reg.Ref("warmd-mgr/kept:v1")}} })
				track(t, cfg, reg)
				first := startStoppable(t, cfg, images.Options{})
				statetest.Wait(t, first.h.store, prefetch.ImagesSection, ready(reg.Ref("warmd-mgr/kept:v1"), imagetest.Digest(t, img)))
				first.stop()
				reg.Close()
				h := start(t, cfg, images.Options{Attempts: 2})
				st := statetest.Wait(t, h.store, prefetch.ImagesSection, func(s prefetch.ImagesStatus) bool {
					im, ok := s.ForRef(reg.Ref("warmd-mgr/kept:v1"))
					return ok && im.State == prefetch.StateReady && im.Warm() && strings.Contains(im.Reason, "failed after")
				})
				im, _ := st.ForRef(reg.Ref("warmd-mgr/kept:v1"))
				if im.Digest != imagetest.Digest(t, img) {
					t.Errorf("digest after restart %s, want %s", im.Digest, imagetest.Digest(t, img))
				}
			})

			t.Run("an image removed behind warmd's back is pulled again", func(t *testing.T) {
				reg := imagetest.NewRegistry(t, imagetest.Options{})
				img := reg.PushRandom(t, "warmd-mgr/yanked:v1", 32<<10, 2)
				cfg := newConfig(t, b, func(c *config.NodeConfig) { c.Images = []config.Image{{Ref: reg.Ref("warmd-mgr/yanked:v1")}} })
				track(t, cfg, reg)
				h := start(t, cfg, images.Options{VerifyInterval: 20 * time.Millisecond})
				st := statetest.Wait(t, h.store, prefetch.ImagesSection, ready(reg.Ref("warmd-mgr/yanked:v1"), imagetest.Digest(t, img)))
				im, _ := st.ForRef(reg.Ref("warmd-mgr/yanked:v1"))
				bk, err := images.Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				defer bk.Close()
				removed := time.Now().UTC()
				if err := bk.Release(t.Context(), im.Name, prefetch.OnRemoveRemove); err != nil {
					t.Fatal(err)
				}
				statetest.Wait(t, h.store, prefetch.ImagesSection, func(s prefetch.ImagesStatus) bool {
					im, ok := s.ForRef(reg.Ref("warmd-mgr/yanked:v1"))
					return ok && ready(im.Ref, imagetest.Digest(t, img))(s) && im.Updated.After(removed) && im.Reason == ""
				})
				if l, err := bk.Lookup(t.Context(), im.Name); err != nil || !l.Pinned || !l.Unpacked {
					t.Errorf("after the re-pull the backend holds %+v (%v)", l, err)
				}
			})

			t.Run("removal from the config deletes every ref", func(t *testing.T) {
				reg := imagetest.NewRegistry(t, imagetest.Options{})
				reg.PushRandom(t, "warmd-mgr/leaving:v1", 32<<10, 2)
				reg.PushRandom(t, "warmd-mgr/staying:v1", 32<<10, 1)
				cfg := newConfig(t, b, func(c *config.NodeConfig) {
					c.Images = []config.Image{{Ref: reg.Ref("warmd-mgr/leaving:v1")}, {Ref: reg.Ref("warmd-mgr/staying:v1")}}
				})
				track(t, cfg, reg)
				h := start(t, cfg, images.Options{})
				st := statetest.Wait(t, h.store, prefetch.ImagesSection, func(s prefetch.ImagesStatus) bool {
					return ready(reg.Ref("warmd-mgr/leaving:v1"), "")(s) && ready(reg.Ref("warmd-mgr/staying:v1"), "")(s)
				})
				leaving, _ := st.ForRef(reg.Ref("warmd-mgr/leaving:v1"))
				next := *cfg
				next.Images = []config.Image{{Ref: reg.Ref("warmd-mgr/staying:v1")}}
				h.m.Reconfigure(&next)
				statetest.Wait(t, h.store, prefetch.ImagesSection, func(s prefetch.ImagesStatus) bool { return len(s.Images) == 1 })
				bk, err := images.Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				defer bk.Close()
				if _, err := bk.Lookup(t.Context(), leaving.Name); !errors.Is(err, prefetch.ErrNotFound) {
					t.Errorf("removed image still present: %v", err)
				}
				if _, err := bk.Lookup(t.Context(), strings.TrimSuffix(leaving.Name, ":v1")+"@"+leaving.Digest); !errors.Is(err, prefetch.ErrNotFound) {
					t.Errorf("repo-digest ref of the removed image still present: %v", err)
				}
			})
		})
	}
}

// TestManagerContainerdRestart kills a private containerd in the middle of a pull; the pull must
// complete on a later attempt once the daemon is back.
func TestManagerContainerdRestart(t *testing.T) {
	for _, tc := range []struct{ name, major, path string }{
		{"containerd-2.4", "2", "warmd"},
		{"containerd-1.6", "1", "pull"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := imagetest.StartDaemon(t, tc.major)
			reg := imagetest.NewRegistry(t, imagetest.Options{})
			img := reg.PushRandom(t, "warmd-mgr/restart:v1", 256<<10, 3)
			entered, release := reg.Gate()
			defer release()
			cfg := newConfig(t, backend{configure: func(_ *testing.T, c *config.NodeConfig) {
				c.Containerd.Address, c.Containerd.Backend = d.Socket, "containerd"
			}}, func(c *config.NodeConfig) { c.Images = []config.Image{{Ref: reg.Ref("warmd-mgr/restart:v1")}} })
			h := start(t, cfg, images.Options{Attempts: 12, Backoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second})
			select {
			case <-entered:
			case <-time.After(2 * time.Minute):
				t.Fatal("the pull never reached the registry's blobs")
			}
			d.Kill()
			d.Start(t)
			release()
			st := statetest.Wait(t, h.store, prefetch.ImagesSection, ready(reg.Ref("warmd-mgr/restart:v1"), imagetest.Digest(t, img)))
			if st.Backend.Path != tc.path {
				t.Errorf("path %q, want %q", st.Backend.Path, tc.path)
			}
		})
	}
}

func TestAutoFallsBackToEmbedded(t *testing.T) {
	tests := []struct {
		name    string
		backend string
		want    string
		wantErr bool
	}{
		{"auto without a socket uses the embedded store", "auto", "embedded", false},
		{"containerd without a socket is an error naming the setting", "containerd", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: "n", DataDir: t.TempDir()}
			cfg.Containerd.Address, cfg.Containerd.Backend = "/nonexistent/warmd-test/containerd.sock", tc.backend
			cfg.Default()
			b, err := images.Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "containerd.address") {
					t.Fatalf("err = %v, want one naming containerd.address", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if got := b.Backend().Name; got != tc.want {
				t.Errorf("backend %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDeadlineScalesWithSize(t *testing.T) {
	o := images.Options{BaseDeadline: 5 * time.Minute, MinThroughput: 5 << 20}
	tests := []struct {
		name string
		size int64
		want time.Duration
	}{
		{"empty", 0, 5 * time.Minute},
		{"500 MiB", 500 << 20, 5*time.Minute + 100*time.Second},
		{"8.7 GB vLLM image", 8_700_000_000, 5*time.Minute + 1659*time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := o.Deadline(tc.size).Truncate(time.Second); got != tc.want {
				t.Errorf("Deadline(%d) = %s, want %s", tc.size, got, tc.want)
			}
		})
	}
}

func TestWanted(t *testing.T) {
	cfg := &config.NodeConfig{
		Models: []config.Model{
			{Name: "a/x", Image: "vllm/vllm-openai:v1"},
			{Name: "a/y", Image: "docker.io/vllm/vllm-openai:v1"},
			{Name: "a/z", Image: "other:v2"},
			{Name: "a/none"},
		},
		Images: []config.Image{{Ref: "docker.io/vllm/vllm-openai:v1"}, {Ref: "Not A Ref"}},
	}
	got := images.Wanted(cfg, func(m config.Model) bool { return m.Name != "a/z" })
	if len(got) != 2 {
		t.Fatalf("Wanted = %+v, want the vllm image once and the bad ref", got)
	}
	if got[0].Name != "docker.io/vllm/vllm-openai:v1" || strings.Join(got[0].Models, ",") != "a/x,a/y" || got[0].Err != nil {
		t.Errorf("first = %+v, want the normalized vllm image serving a/x and a/y", got[0])
	}
	if got[1].Err == nil || !strings.Contains(got[1].Err.Error(), "not a valid reference") {
		t.Errorf("bad ref = %+v, want a parse error", got[1])
	}
}

// TestResyncFollowsWants: when the node starts wanting a model (its labels changed), Resync makes
// the model's image warm without a config change.
func TestResyncFollowsWants(t *testing.T) {
	reg := imagetest.NewRegistry(t, imagetest.Options{})
	reg.PushRandom(t, "warmd-mgr/gained:v1", 16<<10, 1)
	cfg := newConfig(t, backends[2], func(c *config.NodeConfig) {
		c.Models = []config.Model{{Name: "org/gained", Source: "file:///m/", Image: reg.Ref("warmd-mgr/gained:v1")}}
	})
	var wanted atomic.Bool
	h := start(t, cfg, images.Options{Wants: func(config.Model) bool { return wanted.Load() }})
	statetest.Wait(t, h.store, prefetch.ImagesSection, func(s prefetch.ImagesStatus) bool { return s.Backend.Name != "" && len(s.Images) == 0 })
	wanted.Store(true)
	h.m.Resync()
	statetest.Wait(t, h.store, prefetch.ImagesSection, ready(reg.Ref("warmd-mgr/gained:v1"), ""))
}

// TestReadyAtThePlanNotTheDownload: the part is not ready while its backend cannot be opened (the
// reason says so), and ready once the plan is made even though a pull is still running.
func TestReadyAtThePlanNotTheDownload(t *testing.T) {
	unreachable := newConfig(t, backend{configure: func(_ *testing.T, c *config.NodeConfig) {
		c.Containerd.Address, c.Containerd.Backend = "/nonexistent/warmd-test/containerd.sock", "containerd"
	}}, func(*config.NodeConfig) {})
	h := start(t, unreachable, images.Options{})
	statetest.Wait(t, h.store, prefetch.ImagesSection, func(s prefetch.ImagesStatus) bool { return s.Error != "" })
	if err := h.m.Ready(); err == nil || !strings.Contains(err.Error(), "image backend unavailable") {
		t.Errorf("Ready with no backend = %v, want the backend's failure", err)
	}

	reg := imagetest.NewRegistry(t, imagetest.Options{})
	reg.PushRandom(t, "warmd-mgr/slow:v1", 64<<10, 2)
	entered, release := reg.Gate()
	defer release()
	cfg := newConfig(t, backends[2], func(c *config.NodeConfig) { c.Images = []config.Image{{Ref: reg.Ref("warmd-mgr/slow:v1")}} })
	h = start(t, cfg, images.Options{})
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the pull never reached the registry's blobs")
	}
	if err := h.m.Ready(); err != nil {
		t.Errorf("not ready while the first pull runs: %v", err)
	}
}

// TestUnpackParallelNeedsTransfer: containerd.unpack: parallel on a daemon without the Transfer API
// (1.6) is refused when the backend opens, naming what is missing, rather than silently unpacking
// one layer at a time.
func TestUnpackParallelNeedsTransfer(t *testing.T) {
	cfg := newConfig(t, backend{configure: func(t *testing.T, c *config.NodeConfig) {
		c.Containerd.Address, c.Containerd.Backend, c.Containerd.Unpack = testenv.Containerd16(t), "containerd", "parallel"
	}}, func(*config.NodeConfig) {})
	b, err := images.Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		b.Close()
		t.Fatal("containerd 1.6 opened with unpack: parallel")
	}
	if !strings.Contains(err.Error(), "parallel needs the Transfer API, which containerd") {
		t.Errorf("error %q does not say what parallel needs", err)
	}
}
