package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/datadir"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/units"
)

type cacheOptions struct {
	dataDir    string
	sku        string
	configPath string
	noSync     bool
}

func (o *cacheOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", config.DefaultDataDir, "the daemon's data dir")
	f.StringVar(&o.sku, "sku", "", "SKU key of the tree (default: the one the daemon linked as compile-cache/node)")
}

// manager opens the SKU tree the options name, for commands that work on the node's files. readOnly
// opens it without creating or sweeping anything (ls, export: they may run beside the daemon).
func (o *cacheOptions) manager(store objstore.Store, bucket, prefix string, log *slog.Logger, readOnly bool) (*cache.Manager, error) {
	sku := o.sku
	if sku == "" {
		t, err := cache.ReadNodeLink(o.dataDir)
		if err != nil {
			link := filepath.Join(o.dataDir, "compile-cache", cache.NodeLink)
			return nil, &ExitError{Code: 2, Err: fmt.Errorf("no --sku given and %s is not set (%v): run the daemon once on this node or pass --sku (see `warmd gpu`)", link, err)}
		}
		sku = t
	}
	m, err := cache.NewManager(cache.Options{DataDir: o.dataDir, SKU: sku, Store: store, Bucket: bucket, Prefix: prefix,
		Node: os.Getenv("NODE_NAME"), Sync: !o.noSync, Log: log, ReadOnly: readOnly})
	if errors.Is(err, fs.ErrNotExist) && readOnly {
		return nil, &ExitError{Code: 2, Err: fmt.Errorf("no compile-cache tree for SKU %s under %s: %w", sku, o.dataDir, err)}
	}
	return m, err
}

// writer decides how a command that writes the data dir runs: with the data dir's lock when no
// daemon holds it (then local is called), or through the daemon that does (then daemon is called with
// a client for its socket), so only one process ever writes the tree and its records. A lock held by
// something other than a daemon (another CLI writer) is an error naming it.
func (o *cacheOptions) writer(command string, local func() error, daemon func(*api.Client) error) error {
	dir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	lock, err := datadir.Acquire(dir, datadir.Holder{Command: command})
	if err == nil {
		defer lock.Release()
		return local()
	}
	var le *datadir.LockedError
	if errors.As(err, &le) && le.HolderKnown && le.Holder.Socket != "" {
		return daemon(api.NewClient(le.Holder.Socket))
	}
	return err
}

func newCacheCommand(s IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Compile caches per GPU SKU: pod settings, listing, export/import, push/pull",
		Long: `warmd keeps the torch.compile, Inductor, Triton and FlashInfer JIT caches of each GPU SKU under
<data-dir>/compile-cache/<sku-key>/ and shares them through S3 (compileCache.remote).
Pods use them by mounting <data-dir>/compile-cache/node (see 'warmd cache env').`,
	}
	cmd.AddCommand(newCacheEnvCommand(s), newCacheLsCommand(s), newCacheExportCommand(s), newCacheImportCommand(s),
		newCacheSyncCommand(s, "push"), newCacheSyncCommand(s, "pull"))
	return cmd
}

// podCacheSettings is what `warmd cache env` prints: the pieces of a pod spec.
type podCacheSettings struct {
	Env          []corev1.EnvVar      `json:"env"`
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts"`
	Volumes      []corev1.Volume      `json:"volumes"`
}

func newCacheEnvCommand(s IOStreams) *cobra.Command {
	var dataDir, model, output string
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Print the env vars and volume a vLLM pod needs to use the node's compile caches",
		Long: `Print the container env vars and the volume/volumeMount that point a vLLM pod's caches into the
node's SKU tree: VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR and
FLASHINFER_WORKSPACE_BASE under ` + cache.PodMountPath + `, mounted from the hostPath
<data-dir>/compile-cache/node, a link the daemon points at the node's own SKU tree (so one Deployment
works on nodes of every SKU). With --model, vLLM's root is per model, so eviction can tell which
model's tree a running pod uses. Paste the output into the container and pod spec.`,
		Example: `  warmd cache env
  warmd cache env --model Qwen/Qwen2.5-7B-Instruct
  warmd cache env -o json`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if err := CheckFormat(output, "yaml", "json"); err != nil {
				return err
			}
			env, err := cache.PodEnv(cache.PodMountPath, model)
			if err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("--model: %w", err)}
			}
			var st podCacheSettings
			for _, e := range env {
				st.Env = append(st.Env, corev1.EnvVar{Name: e.Name, Value: e.Value})
			}
			st.VolumeMounts = []corev1.VolumeMount{{Name: "warmd-compile-cache", MountPath: cache.PodMountPath}}
			dir := corev1.HostPathDirectory
			st.Volumes = []corev1.Volume{{Name: "warmd-compile-cache", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(dataDir, "compile-cache", cache.NodeLink), Type: &dir}}}}
			if output == "yaml" {
				fmt.Fprintln(s.Out, "# warmd compile caches: env and volumeMounts go in the vLLM container, volumes in the pod spec.")
				for _, e := range env {
					fmt.Fprintf(s.Out, "# %s: %s\n", e.Name, e.Why)
				}
			}
			return PrintObject(s.Out, output, st)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", config.DefaultDataDir, "the daemon's data dir on the nodes")
	f.StringVar(&model, "model", "", "model name (as vLLM's --model) for a per-model vLLM cache root")
	f.StringVarP(&output, "output", "o", "yaml", "output format: yaml or json")
	return cmd
}

func newCacheLsCommand(s IOStreams) *cobra.Command {
	var o cacheOptions
	var output string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the bundles the node's SKU tree holds",
		Long: `List the compile-cache bundles recorded for the node's SKU tree: component, files, bytes, where
each came from (captured here, restored from the bucket, imported), when a pod last used it, and
whether it is uploaded or evicted. It reads the data dir; the daemon need not run.`,
		Example: `  warmd cache ls
  warmd cache ls --sku nvidia-h100-80gb-hbm3.sm90.cuda12.8.drv570-1a2b3c4d -o json`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if err := CheckFormat(output, "table", "json", "yaml"); err != nil {
				return err
			}
			m, err := o.manager(nil, "", "", nil, true)
			if err != nil {
				return err
			}
			defer m.Close()
			recs := m.Records()
			slices.SortFunc(recs, func(a, b cache.Record) int { return b.LastUsed.Compare(a.LastUsed) })
			if output != "table" {
				return PrintObject(s.Out, output, recs)
			}
			st := cache.Snapshot(m, "", "")
			fmt.Fprintf(s.Out, "SKU %s: %s in %s, %d bundles\n", st.SKU, units.Bytes(st.Bytes), st.Root, st.BundlesLocal)
			tw := tabwriter.NewWriter(s.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BUNDLE\tCOMPONENT\tFILES\tBYTES\tORIGIN\tLAST USED\tSTATE\tVERSIONS")
			for _, r := range recs {
				state := "local"
				switch {
				case !r.Live():
					state = "evicted"
				case r.Uploaded:
					state = "shared"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.SHA256[:12], r.Manifest.Component, len(r.Manifest.Entries),
					units.Bytes(r.Manifest.Bytes), r.Origin, r.LastUsed.Format(time.RFC3339), state, versionsText(r.Manifest.Versions))
			}
			return tw.Flush()
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func newCacheExportCommand(s IOStreams) *cobra.Command {
	var o cacheOptions
	var out string
	cmd := &cobra.Command{
		Use:   "export --out DIR",
		Short: "Write the node's compile caches as bundle files (for air-gapped clusters)",
		Long: `Pack every complete file of the node's SKU tree into content-addressed bundle files under
DIR/<sku>/<component>/<sha256>.tar.zst. Copy them to a node of the same SKU in the other cluster and
run 'warmd cache import'.`,
		Example: `  warmd cache export --out /mnt/usb/warmd-caches`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return &ExitError{Code: 2, Err: fmt.Errorf("--out is required: the dir to write bundle files to")}
			}
			m, err := o.manager(nil, "", "", nil, true)
			if err != nil {
				return err
			}
			defer m.Close()
			files, err := m.Export(cmd.Context(), out)
			for _, f := range files {
				fmt.Fprintln(s.Out, f)
			}
			return err
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&out, "out", "", "dir to write bundle files to")
	return cmd
}

func newCacheImportCommand(s IOStreams) *cobra.Command {
	var o cacheOptions
	var component string
	cmd := &cobra.Command{
		Use:   "import FILE...",
		Short: "Restore bundle files made by 'warmd cache export' into the node's SKU tree",
		Long: `Verify and extract bundle files into the node's SKU tree with the same checks as a restore from
the bucket: a bundle built on another SKU is refused (its kernels would not load here), and paths
escaping the tree, links, device files, sparse entries, oversized or corrupt bundles and files whose
sha256 differs from the manifest are rejected, and nothing of a rejected bundle is kept. The component
is taken from each file's parent dir (as export lays them out) unless --component is given.

While the daemon runs, the bundles are streamed to it over its socket and it imports them (one writer
per data dir: an import beside the daemon would be captured again as the node's own); otherwise this
command takes the data dir's lock itself.`,
		Example: `  warmd cache import /mnt/usb/warmd-caches/*/*/*.tar.zst`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			failed := 0
			report := func(f string, err error) {
				fmt.Fprintf(s.ErrOut, "%s: %v\n", f, err)
				failed++
			}
			err := o.writer("warmd cache import", func() error {
				m, err := o.manager(nil, "", "", nil, false)
				if err != nil {
					return err
				}
				defer m.Close()
				for _, f := range args {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					res, err := m.Import(ctx, f, component)
					if err != nil {
						report(f, err)
						continue
					}
					fmt.Fprintf(s.Out, "imported %s (%s, %d entries)%s\n", res.Record.SHA256[:12], res.Record.Manifest.Component, len(res.Record.Manifest.Entries), leftOut(res.Conflicts))
				}
				return nil
			}, func(c *api.Client) error {
				fmt.Fprintf(s.ErrOut, "the daemon holds %s: importing through it (%s)\n", o.dataDir, c.Socket)
				for _, f := range args {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					res, err := importThrough(ctx, c, f, component)
					if err != nil {
						report(f, err)
						continue
					}
					fmt.Fprintf(s.Out, "imported %s (%s, %d entries)%s\n", res.SHA256[:12], res.Component, res.Entries, leftOut(res.Conflicts))
				}
				return nil
			})
			if err != nil {
				return err
			}
			if failed > 0 {
				return &ExitError{Code: 1, Err: fmt.Errorf("%d of %d bundles not imported", failed, len(args))}
			}
			return nil
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&component, "component", "", "component of every file (vllm, inductor, triton, flashinfer)")
	return cmd
}

// newCacheSyncCommand is push (capture + upload) or pull (restore) once, outside the daemon: for
// seeding a bucket from a node that compiled, and for benchmarks.
func newCacheSyncCommand(s IOStreams, dir string) *cobra.Command {
	var o cacheOptions
	short := map[string]string{"push": "Capture the node's new compile-cache files and upload them to the bucket once",
		"pull": "Restore the SKU's bundles from the bucket once"}[dir]
	cmd := &cobra.Command{
		Use:   dir + " --config FILE",
		Short: short,
		Long: short + `. The bucket and S3 settings come from the config file (compileCache.remote, s3);
credentials from the default AWS chain. The daemon does this continuously; use this to seed a bucket
or to check access. While the daemon runs, it is asked to do it now (over its socket) instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(o.configPath)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			if cfg.CompileCache.Remote == "" {
				return &ExitError{Code: 2, Err: fmt.Errorf("%s sets no compileCache.remote: set it to s3://bucket/prefix", o.configPath)}
			}
			if !cmd.Flags().Changed("data-dir") {
				o.dataDir = cfg.DataDir
			}
			bucket, prefix, err := config.ParseS3URL(cfg.CompileCache.Remote)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			ctx := cmd.Context()
			return o.writer("warmd cache "+dir, func() error {
				store, err := objstore.NewS3(ctx, cfg.S3, objstore.Options{MaxConns: 32})
				if err != nil {
					return err
				}
				m, err := o.manager(store, bucket, prefix, nil, false)
				if err != nil {
					return err
				}
				defer m.Close()
				return runSync(ctx, s, m, dir)
			}, func(c *api.Client) error {
				fmt.Fprintf(s.ErrOut, "the daemon holds %s: asking it to %s (%s)\n", o.dataDir, dir, c.Socket)
				res, err := c.CacheSync(ctx, dir)
				if err != nil {
					return err
				}
				return printSync(s, res)
			})
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&o.configPath, "config", "", "NodeConfig file with s3 and compileCache.remote")
	if dir == "pull" {
		cmd.Flags().BoolVar(&o.noSync, "no-sync", false, "skip the file-system flush before restored files are renamed into place "+
			"(faster; a power loss may then leave restored files with missing data — kill -9 still cannot)")
	}
	return cmd
}

func runSync(ctx context.Context, s IOStreams, m *cache.Manager, dir string) error {
	start := time.Now()
	if dir == "push" {
		res, err := m.Capture(ctx)
		if err != nil {
			return err
		}
		n, err := m.Upload(ctx)
		fmt.Fprintf(s.Out, "captured %d bundles (%d files not complete yet), uploaded %d in %.2fs\n", len(res.Bundles), res.Pending, n, time.Since(start).Seconds())
		if res.Skipped > 0 {
			// The log names the first few, cut; each costs only itself.
			fmt.Fprintf(s.Out, "left out %d entries of the pod-written tree that are never captured (links, special files, names that are not valid paths, dirs too deep, sparse or oversized files)\n", res.Skipped)
		}
		return err
	}
	res, err := m.Restore(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "restored %d of %d bundles in %.2fs\n", len(res.Restored), res.Remote, time.Since(start).Seconds())
	for _, r := range res.Refused {
		fmt.Fprintf(s.ErrOut, "refused: %s\n", r)
	}
	if len(res.Refused) > 0 {
		return &ExitError{Code: 1, Err: fmt.Errorf("%d bundles refused", len(res.Refused))}
	}
	return nil
}

// importThrough streams one bundle file to the daemon.
func importThrough(ctx context.Context, c *api.Client, file, component string) (*api.CacheImport, error) {
	if component == "" {
		component = filepath.Base(filepath.Dir(file)) // as export lays files out; the daemon checks it
	}
	if st, err := os.Stat(file); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file")
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return c.CacheImport(ctx, f, component)
}

// printSync reports what the daemon's pull or push did, as runSync does for a local one.
func printSync(s IOStreams, r *api.CacheSync) error {
	if r.Op == "push" {
		fmt.Fprintf(s.Out, "captured %d bundles (%d files not complete yet), uploaded %d in %.2fs\n", r.Captured, r.Pending, r.Uploaded, r.Seconds)
		return nil
	}
	fmt.Fprintf(s.Out, "restored %d of %d bundles in %.2fs\n", r.Restored, r.Remote, r.Seconds)
	for _, x := range r.Refused {
		fmt.Fprintf(s.ErrOut, "refused: %s\n", x)
	}
	if len(r.Refused) > 0 {
		return &ExitError{Code: 1, Err: fmt.Errorf("%d bundles refused", len(r.Refused))}
	}
	return nil
}

func versionsText(v map[string][]string) string {
	var out []string
	for _, k := range []string{"flashinfer", "flashinfer-arch", "vllm-cache-hash", "vllm-aot-hash"} {
		for _, x := range v[k] {
			out = append(out, k+"="+x)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	if len(out) > 3 {
		out = append(out[:3], "…")
	}
	return fmt.Sprint(out)
}

// leftOut says how many entries an import left out (a different file or link kept in their place,
// or a dir of theirs replaced in the tree), naming the first few cut at 128 bytes.
func leftOut(conflicts []string) string {
	if len(conflicts) == 0 {
		return ""
	}
	var names []string
	for _, c := range conflicts[:min(3, len(conflicts))] {
		names = append(names, fsroot.Quote(c))
	}
	return fmt.Sprintf("; %d entries left out, kept what the tree holds there: %s", len(conflicts), strings.Join(names, ", "))
}
