package images

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/containerd"
	"warmd.io/warmd/pkg/prefetch/images/embedded"
	"warmd.io/warmd/pkg/prefetch/images/layerindex"
	"warmd.io/warmd/pkg/prefetch/images/oci"
)

// Open builds the backend config.Containerd.Backend asks for: containerd, embedded, or auto
// (containerd when its socket answers, else embedded under <dataDir>/images).
func Open(ctx context.Context, cfg *config.NodeConfig, log *slog.Logger) (prefetch.Images, error) {
	return OpenWithPeers(ctx, cfg, log, nil)
}

// OpenWithPeers is Open with a containerd backend that takes layers from warm peers first (peers
// nil: from the registry alone). The manager opens its backend this way.
func OpenWithPeers(ctx context.Context, cfg *config.NodeConfig, log *slog.Logger, peers *containerd.Peers) (prefetch.Images, error) {
	reg := Registry(cfg)
	openCD := func() (prefetch.Images, error) {
		o := containerd.Options{
			Address: cfg.Containerd.Address, Namespace: cfg.Containerd.Namespace,
			Snapshotter: cfg.Containerd.Snapshotter, Registry: reg, Log: log,
			Path: apiPath(cfg.Containerd.Unpack), Peers: peers,
		}
		if o.Path == containerd.PathWarmd {
			idx, err := openIndexes(ctx, cfg, log)
			if err != nil {
				return nil, err
			}
			o.Indexes = idx
		}
		return containerd.New(ctx, o)
	}
	openEmbedded := func() (prefetch.Images, error) {
		return embedded.New(embedded.Options{Dir: filepath.Join(cfg.DataDir, "images"), Registry: reg, Log: log})
	}
	switch cfg.Containerd.Backend {
	case "containerd":
		return openCD()
	case "embedded":
		return openEmbedded()
	case "auto", "":
		if _, err := os.Stat(cfg.Containerd.Address); err != nil {
			log.Info("no containerd socket; using the embedded image store", "socket", cfg.Containerd.Address, "err", err)
			return openEmbedded()
		}
		b, err := openCD()
		if err != nil {
			log.Warn("containerd socket does not answer; using the embedded image store", "err", err)
			return openEmbedded()
		}
		return b, nil
	}
	return nil, fmt.Errorf("containerd.backend %q is not auto, containerd or embedded", cfg.Containerd.Backend)
}

// apiPath maps containerd.unpack to the backend's API path: parallel forces the parallel path; daemon
// (or empty) leaves the backend to detect Transfer or, on a daemon without it (1.6), Pull.
func apiPath(unpack string) string {
	switch unpack {
	case "parallel":
		return containerd.PathParallel
	case "warmd":
		return containerd.PathWarmd
	}
	return ""
}

// openIndexes keeps layers' gzip checkpoint indexes under <dataDir>/images/gzindex and, where
// compileCache.remote names a bucket, shares them there too (beside the compile caches, under
// <prefix>/gzindex/), so one node's first inflate of a layer lets every node decode it on every core.
func openIndexes(ctx context.Context, cfg *config.NodeConfig, log *slog.Logger) (containerd.IndexStore, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	root, err := fsroot.Open(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	local, err := layerindex.Open(root, fsroot.MustPath("images/gzindex"))
	if err != nil || cfg.CompileCache.Remote == "" {
		return local, err
	}
	bucket, prefix, err := config.ParseS3URL(cfg.CompileCache.Remote)
	if err != nil {
		return nil, fmt.Errorf("compileCache.remote: %w", err)
	}
	store, err := objstore.NewS3(ctx, cfg.S3, objstore.Options{Log: log, MaxConns: 4})
	if err != nil {
		return nil, err
	}
	return layerindex.NewShared(local, store, bucket, prefix, log), nil
}

// Registry is the registry access the config describes.
func Registry(cfg *config.NodeConfig) oci.Registry {
	return oci.Registry{
		Auth:      oci.Auth{Files: slices.Clone(cfg.ImagePull.AuthFiles)},
		HostsDir:  cfg.ImagePull.HostsDir,
		PlainHTTP: slices.Clone(cfg.ImagePull.PlainHTTP),
	}
}

// BackendSettings is what the backend is opened with: a reload that changes it reopens the backend
// (between pulls). peers.stallTimeout is here because the containerd backend's peer fetch takes it
// when it opens. Exported for the test that walks every NodeConfig setting (pkg/assemble).
func BackendSettings(cfg *config.NodeConfig) string {
	b, _ := json.Marshal([]any{cfg.Containerd, cfg.DataDir, cfg.ImagePull.AuthFiles, cfg.ImagePull.HostsDir,
		cfg.ImagePull.PlainHTTP, cfg.CompileCache.Remote, cfg.S3, cfg.Peers.StallTimeout, cfg.NodeName})
	return string(b)
}

// Want is one image this node needs and why.
type Want struct {
	// Ref as configured (the first spelling seen).
	Ref string
	// Name is the normalized reference, the key images are deduplicated by.
	Name string
	// Models whose Image it is.
	Models []string
	// Err is set when Ref does not parse; the image is reported failed with it.
	Err error
}

// Wanted lists the images cfg asks this node to keep warm: each wanted model's Image and every
// config.Images entry, deduplicated by normalized name. wants nil means every model.
func Wanted(cfg *config.NodeConfig, wants func(config.Model) bool) []Want {
	var out []Want
	index := map[string]int{}
	add := func(ref, model string) {
		name, err := ref, error(nil)
		if pr, perr := oci.ParseRef(ref); perr == nil {
			name = pr.Name
		} else {
			err = perr
		}
		i, ok := index[name]
		if !ok {
			i = len(out)
			index[name] = i
			out = append(out, Want{Ref: ref, Name: name, Err: err})
		}
		if model != "" && !slices.Contains(out[i].Models, model) {
			out[i].Models = append(out[i].Models, model)
		}
	}
	for _, m := range cfg.Models {
		if m.Image == "" || (wants != nil && !wants(m)) {
			continue
		}
		add(m.Image, m.Name)
	}
	for _, im := range cfg.Images {
		add(im.Ref, "")
	}
	return out
}
