package cli

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/datadir"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
	"warmd.io/warmd/pkg/units"
)

type prefetchWeightsOptions struct {
	configPath string
	models     []string
	name       string
	revision   string
	manifest   string
	endpoint   string
	region     string
	profile    string
	pathStyle  bool
	conc       int
	chunk      string
	bandwidth  string
	pageCache  string
	progress   string
	output     string
	logLevel   string
}

func newPrefetchWeightsCommand(s IOStreams) *cobra.Command {
	o := prefetchWeightsOptions{}
	cmd := &cobra.Command{
		Use:   "weights [--config FILE [--model NAME]... | SOURCE DIR]",
		Short: "Download, verify and publish model weights once, with live progress",
		Long: `Fetch model weights with the engine warmd run uses: parallel ranged GETs, resumable staging
(rerun after any interruption, kill -9 included, and finished chunks are not fetched again),
verification of every file, and an atomic publish in the Hugging Face cache layout.

With --config, fetch the config's models (or those named by --model) into <dataDir>/weights.
With SOURCE DIR (s3://bucket/prefix/ or file:///path/), fetch one model into DIR as an HF cache
root: run vLLM with HF_HUB_CACHE=DIR --model NAME, or --model with the printed snapshot path.
S3 credentials come from the default AWS chain (env, shared files, IRSA, pod identity).
Exit status 1 when any model failed.`,
		Example: `  warmd prefetch weights --config /etc/warmd/config.yaml --model Qwen/Qwen2.5-7B-Instruct
  warmd prefetch weights s3://models/qwen7b/ /mnt/hf --name Qwen/Qwen2.5-7B-Instruct --endpoint http://127.0.0.1:9000`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 && len(args) != 2 {
				return &ExitError{Code: 2, Err: errors.New("want either --config FILE or SOURCE DIR")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return prefetchWeights(cmd, s, o, args) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.configPath, "config", "c", "", "NodeConfig file (YAML)")
	f.StringArrayVar(&o.models, "model", nil, "with --config: fetch only this model (repeatable)")
	f.StringVar(&o.name, "name", "", "with SOURCE DIR: the model id (org/name); default local/<last path element>")
	f.StringVar(&o.revision, "revision", "main", "with SOURCE DIR: the snapshot revision")
	f.StringVar(&o.manifest, "sha256-manifest", "", "with SOURCE DIR: a sha256sum file under SOURCE to verify against")
	f.StringVar(&o.endpoint, "endpoint", "", "with SOURCE DIR: S3-compatible endpoint URL (empty: AWS S3)")
	f.StringVar(&o.region, "region", config.DefaultRegion, "with SOURCE DIR: S3 region")
	f.StringVar(&o.profile, "profile", "", "with SOURCE DIR: AWS shared-config profile")
	f.BoolVar(&o.pathStyle, "path-style", true, "with SOURCE DIR and --endpoint: path-style bucket addressing")
	f.IntVar(&o.conc, "concurrency", 0, "ranged GETs in flight (default: config, else 16)")
	f.StringVar(&o.chunk, "chunk-size", "", "bytes per ranged GET, e.g. 16Mi (default: config, else 16Mi)")
	f.StringVar(&o.bandwidth, "bandwidth-limit", "", "bytes per second cap, e.g. 500Mi (default: config, else none)")
	f.StringVar(&o.pageCache, "page-cache", "", "bypass (O_DIRECT) or keep (the model stays in the page cache) (default: config, else bypass)")
	f.StringVar(&o.progress, "progress", "auto", "progress display: auto (bar on a terminal), bars, plain, none")
	f.StringVarP(&o.output, "output", "o", "text", "summary format: text or json")
	f.StringVar(&o.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	return cmd
}

func prefetchWeights(cmd *cobra.Command, s IOStreams, o prefetchWeightsOptions, args []string) error {
	if err := CheckFormat(o.output, "text", "json"); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	if err := CheckProgress(o.progress); err != nil {
		return err
	}
	log, err := newLogger(s, "text", o.logLevel)
	if err != nil {
		return err
	}
	var cfg *config.NodeConfig
	var cacheRoot string
	switch {
	case len(args) == 2 && o.configPath == "":
		cfg, cacheRoot, err = adhocConfig(o, args[0], args[1])
	case len(args) == 0 && o.configPath != "":
		cfg, err = config.Load(o.configPath)
	default:
		err = errors.New("give either --config FILE or SOURCE DIR, not both")
	}
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	if err := applyTuning(cfg, o); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	models, err := pickModels(cfg, o.models)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	release, err := lockForWeights(cfg.DataDir)
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	defer release()
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	eo := weights.Options{DataDir: cfg.DataDir, CacheRoot: cacheRoot, Concurrency: cfg.Weights.Concurrency,
		ChunkSize: cfg.Weights.ChunkSize.Value(), BandwidthLimit: cfg.Weights.BandwidthLimit.Value(),
		Budget: cfg.Weights.Budget.Value(), InUseWindow: cfg.Weights.InUseWindow.Duration, Log: log,
		BufferedIO: cfg.Weights.PageCache == config.PageCacheKeep,
		Open: weights.SourceOpener(func(ctx context.Context) (objstore.Store, error) {
			return objstore.NewS3(ctx, cfg.S3, objstore.Options{MaxConns: 2 * cfg.Weights.Concurrency, Log: log})
		})}
	e, err := weights.New(eo)
	if err != nil {
		return err
	}
	defer e.Close()
	pr := newWeightsProgress(ctx, s, o.progress)
	var results []prefetch.ModelStatus
	var failed []string
	for _, m := range models {
		st, err := e.Fetch(ctx, m, pr.report)
		results = append(results, st)
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	pr.Finish()
	if o.output == "json" {
		if err := PrintObject(s.Out, "json", results); err != nil {
			return err
		}
	} else {
		printWeightsSummary(s, results)
	}
	if len(failed) > 0 {
		return &ExitError{Code: 1, Err: fmt.Errorf("some models are not ready:\n  %s", strings.Join(failed, "\n  "))}
	}
	return nil
}

// adhocConfig builds a one-model config for SOURCE DIR: DIR is the HF cache root, warmd's own
// records go to DIR/.warmd.
func adhocConfig(o prefetchWeightsOptions, source, dir string) (*config.NodeConfig, string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, "", err
	}
	name := o.name
	if name == "" {
		name = "local/" + path.Base(strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(source, "s3://"), "file://"), "/"))
	}
	cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, DataDir: filepath.Join(abs, ".warmd"),
		S3:     config.S3{Endpoint: o.endpoint, Region: o.region, Profile: o.profile},
		Models: []config.Model{{Name: name, Source: source, Revision: o.revision, SHA256Manifest: o.manifest}}}
	if o.endpoint != "" {
		cfg.S3.UsePathStyle = &o.pathStyle
	}
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		// No API is served here, so the socket path derived from DIR is never bound.
		var ve *config.ValidationError
		if !errors.As(err, &ve) {
			return nil, "", err
		}
		if err := ve.Without("api.socket"); err != nil {
			return nil, "", err
		}
	}
	return cfg, abs, nil
}

func applyTuning(cfg *config.NodeConfig, o prefetchWeightsOptions) error {
	if o.conc > 0 {
		cfg.Weights.Concurrency = o.conc
	}
	switch o.pageCache {
	case "":
	case config.PageCacheBypass, config.PageCacheKeep:
		cfg.Weights.PageCache = o.pageCache
	default:
		return fmt.Errorf("--page-cache %q: use bypass or keep", o.pageCache)
	}
	for flag, p := range map[string]struct {
		v   string
		dst *resource.Quantity
	}{"--chunk-size": {o.chunk, &cfg.Weights.ChunkSize}, "--bandwidth-limit": {o.bandwidth, &cfg.Weights.BandwidthLimit}} {
		if p.v == "" {
			continue
		}
		q, err := resource.ParseQuantity(p.v)
		if err != nil {
			return fmt.Errorf("%s %q: %w (use e.g. 16Mi)", flag, p.v, err)
		}
		*p.dst = q
	}
	return nil
}

func pickModels(cfg *config.NodeConfig, names []string) ([]config.Model, error) {
	if len(names) == 0 {
		if len(cfg.Models) == 0 {
			return nil, errors.New("the config lists no models")
		}
		return cfg.Models, nil
	}
	var out []config.Model
	for _, n := range names {
		found := false
		for _, m := range cfg.Models {
			if m.Name == n {
				out, found = append(out, m), true
			}
		}
		if !found {
			var have []string
			for _, m := range cfg.Models {
				have = append(have, m.Name)
			}
			return nil, fmt.Errorf("--model %q is not in the config (it has: %s)", n, strings.Join(have, ", "))
		}
	}
	return out, nil
}

// weightsProgress shows one live bar per model (bytes, state, rate, ETA), or a plain line when a
// model's state changes and every 2 s while it downloads.
type weightsProgress struct {
	*Progress
	mu   sync.Mutex // guards last and said
	last map[string]prefetch.State
	said map[string]time.Time
}

func newWeightsProgress(ctx context.Context, s IOStreams, mode string) *weightsProgress {
	return &weightsProgress{Progress: NewProgress(ctx, s, mode, 40), last: map[string]prefetch.State{}, said: map[string]time.Time{}}
}

func (wp *weightsProgress) report(st prefetch.ModelStatus) {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	prev := wp.last[st.Model]
	wp.last[st.Model] = st.State
	if st.BytesTotal > 0 || st.State != prefetch.StateQueued || wp.HasBar(st.Model) {
		extra := ""
		if st.BytesPerSecond > 0 {
			extra = units.Rate(st.BytesPerSecond) + " ETA " + (time.Duration(st.ETASeconds) * time.Second).String()
		}
		wp.Bar(st.Model, BarUpdate{Label: st.Model, Done: st.BytesDone, Total: st.BytesTotal, Status: string(st.State), Extra: extra,
			Final: st.State == prefetch.StateReady || st.State == prefetch.StateFailed})
	}
	if st.State != prev || time.Since(wp.said[st.Model]) > 2*time.Second {
		wp.said[st.Model] = time.Now()
		wp.Printf("%s: %s %s\n", st.Model, st.State, progressLine(st))
	}
}

func progressLine(st prefetch.ModelStatus) string {
	line := fmt.Sprintf("%s / %s", units.Bytes(st.BytesDone), units.Bytes(st.BytesTotal))
	if st.BytesPerSecond > 0 {
		line += fmt.Sprintf(", %s, ETA %s", units.Rate(st.BytesPerSecond), (time.Duration(st.ETASeconds) * time.Second).String())
	}
	if st.Reason != "" {
		line += ": " + st.Reason
	}
	return line
}

func printWeightsSummary(s IOStreams, results []prefetch.ModelStatus) {
	tw := tabwriter.NewWriter(s.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tREVISION\tSTATE\tSIZE\tTIME\tVERIFIED\tSNAPSHOT")
	for _, st := range results {
		dur := "-"
		if !st.Finished.IsZero() && !st.Started.IsZero() {
			dur = st.Finished.Sub(st.Started).Round(10 * time.Millisecond).String()
		}
		snap := st.SnapshotPath
		if snap == "" {
			snap = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", st.Model, st.Revision, st.State, units.Bytes(st.BytesTotal), dur, verifiedSummary(st.Files), snap)
	}
	tw.Flush()
	for _, st := range results {
		if st.Reason != "" {
			fmt.Fprintf(s.Out, "%s: %s\n", st.Model, st.Reason)
		}
	}
}

// verifiedSummary counts files per verification method ("3 s3-checksum, 2 size").
func verifiedSummary(files []prefetch.FileVerification) string {
	if len(files) == 0 {
		return "-"
	}
	counts := map[string]int{}
	var order []string
	for _, f := range files {
		if counts[f.Method] == 0 {
			order = append(order, f.Method)
		}
		counts[f.Method]++
	}
	var parts []string
	for _, m := range order {
		parts = append(parts, fmt.Sprintf("%d %s", counts[m], m))
	}
	return strings.Join(parts, ", ")
}

// lockForWeights takes the data dir's lock for the run: staging, journals, blobs and records live
// under it, and two writers would fetch the same chunks twice and race each other's publish. A
// daemon holding it already keeps the configured models warm, so the error says to read `warmd
// status` (or to give this command its own data dir) rather than to wait.
func lockForWeights(dataDir string) (release func(), err error) {
	lock, err := datadir.Acquire(dataDir, datadir.Holder{Command: "warmd prefetch weights"})
	if err == nil {
		return func() { lock.Release() }, nil
	}
	var le *datadir.LockedError
	if errors.As(err, &le) && le.HolderKnown && le.Holder.Socket != "" {
		return nil, fmt.Errorf("%w (the daemon already fetches this config's models: see `warmd status`; "+
			"to fetch elsewhere, give SOURCE DIR or a config with another dataDir)", err)
	}
	return nil, err
}
