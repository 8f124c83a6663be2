package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"warmd.io/warmd/pkg/assemble"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/datadir"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images"
)

type prefetchImagesOptions struct {
	configPath string
	logLevel   string
	progress   string
	timeout    time.Duration
}

func newPrefetchImagesCommand(s IOStreams) *cobra.Command {
	o := prefetchImagesOptions{}
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Pull, unpack and pin the config's images once, with per-layer progress",
		Long: `Pull every image the config names (each model's image and config.images) through the backend
warmd run would use (containerd.backend: auto, containerd or embedded), unpack it into the CRI's
snapshotter, and pin it, once, in the foreground. It uses the same retries, size-scaled deadlines,
registry credentials (imagePull.authFiles) and hosts.toml dir as the daemon; with peers.enabled it
takes layers (and their checkpoint indexes) from warm peers first, found through the API server as
the daemon finds them. It never removes anything. Exit status 1 when any image failed (each failure is listed).`,
		Example: `  warmd prefetch images --config /etc/warmd/config.yaml
  warmd prefetch images -c warmd.yaml --progress plain   # one line per layer event, for logs`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return prefetchImages(cmd.Context(), s, o) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.configPath, "config", "c", "/etc/warmd/config.yaml", "NodeConfig file (YAML)")
	f.StringVar(&o.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	f.StringVar(&o.progress, "progress", "auto", "progress display: auto (bars on a terminal), bars, plain, none")
	f.DurationVar(&o.timeout, "timeout", 0, "give up after this long (0: only the per-image deadlines apply)")
	return cmd
}

func prefetchImages(ctx context.Context, s IOStreams, o prefetchImagesOptions) error {
	if err := CheckProgress(o.progress); err != nil {
		return err
	}
	log, err := newLogger(s, "text", o.logLevel)
	if err != nil {
		return err
	}
	cfg, err := config.Load(o.configPath)
	if err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("%s: %w", o.configPath, err)}
	}
	release, err := lockForImages(cfg)
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	defer release()
	if ctx == nil {
		ctx = context.Background()
	}
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	pr := newLayerProgress(ctx, s, o.progress)
	m := images.New(imageDeps(cfg, log), images.Options{OnProgress: pr.report})
	start := time.Now()
	st, err := m.Once(ctx)
	pr.Finish()
	printImageSummary(s, st, time.Since(start))
	if err != nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("some images are not warm:\n%w", err)}
	}
	return nil
}

// imageDeps gives the pull an API client when peers.enabled (and readiness not disabled) so
// layers come from warm peers as in `warmd run`; without one the registry serves every layer.
func imageDeps(cfg *config.NodeConfig, log *slog.Logger) daemon.Deps {
	d := daemon.Deps{Config: cfg, Log: log}
	if cfg.Peers.Enabled && !cfg.Readiness.Disabled {
		kc, err := assemble.KubeClient(cfg.Readiness.Kubeconfig)
		if err != nil {
			log.Warn("no warm peers asked for layers: no API client", "err", err)
		}
		d.Kube = kc
	}
	return d
}

// layerProgress shows one bar per layer, or a plain line as each layer completes.
type layerProgress struct {
	*Progress
	mu   sync.Mutex
	seen map[string]bool
}

func newLayerProgress(ctx context.Context, s IOStreams, mode string) *layerProgress {
	return &layerProgress{Progress: NewProgress(ctx, s, mode, 32), seen: map[string]bool{}}
}

func (lp *layerProgress) report(name string, p prefetch.Progress) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	for i, l := range p.Layers {
		key := name + " " + l.Digest.String()
		label := fmt.Sprintf("%s layer %d/%d %s", shortName(name), i+1, len(p.Layers), l.Digest.Encoded()[:12])
		lp.Bar(key, BarUpdate{Label: label, Done: l.Done, Total: l.Size, Final: l.Complete, Percent: true})
		if l.Complete && !lp.seen[key] {
			lp.seen[key] = true
			from := ""
			if l.FromPeers {
				from = " from warm peers"
			}
			lp.Printf("%s: %d bytes%s, done\n", label, l.Size, from)
		}
	}
}

func shortName(name string) string {
	if len(name) > 48 {
		return "…" + name[len(name)-47:]
	}
	return name
}

func printImageSummary(s IOStreams, st prefetch.ImagesStatus, took time.Duration) {
	fmt.Fprintf(s.Out, "Backend: %s (%s API): %s\n", orDashStr(st.Backend.Name), orDashStr(st.Backend.Path), orDashStr(st.Backend.Detail))
	if st.Error != "" {
		fmt.Fprintf(s.Out, "Error:   %s\n", st.Error)
	}
	tw := tabwriter.NewWriter(s.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tSTATE\tPINNED\tDIGEST\tREASON")
	for _, im := range st.Images {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", im.Ref, im.State, im.Pinned, orDashStr(im.Digest), orDashStr(im.Reason))
	}
	tw.Flush()
	fmt.Fprintf(s.Out, "Took %s\n", took.Round(10*time.Millisecond))
}

func orDashStr(v string) string {
	if v == "" {
		return "-"
	}
	return v
}

// lockForImages takes the data dir's lock for the run: the embedded image store lives under the data
// dir, and two writers there would interleave blobs and records. When a daemon holds the lock, a
// containerd backend (explicitly configured) is still fine to pull into, since containerd itself
// serialises its writers; anything else is refused, naming the daemon, because the daemon already
// keeps this config's images warm.
func lockForImages(cfg *config.NodeConfig) (release func(), err error) {
	lock, err := datadir.Acquire(cfg.DataDir, datadir.Holder{Command: "warmd prefetch images"})
	if err == nil {
		return func() { lock.Release() }, nil
	}
	var le *datadir.LockedError
	if errors.As(err, &le) && le.HolderKnown && le.Holder.Socket != "" && cfg.Containerd.Backend == "containerd" {
		return func() {}, nil
	}
	if errors.As(err, &le) {
		return nil, fmt.Errorf("%w (with the embedded image store only one process may write it: the daemon keeps the "+
			"configured images warm itself, see `warmd status`; or set containerd.backend: containerd)", err)
	}
	return nil, err
}
