// Package cache owns the node's compile caches, one tree per GPU SKU key:
//
//	<dataDir>/compile-cache/<sku-key>/{vllm,inductor,triton,flashinfer}
//	<dataDir>/compile-cache/node -> <sku-key>     (what pods mount; the same hostPath on every node)
//	<dataDir>/compile-cache/.bundles/<sku-key>/   (records of the bundles the tree holds)
//
// It captures what pods compile into those trees (a recursive fsnotify watch, a quiet period, only
// complete files), packs new files into content-addressed bundles (pkg/cache/bundle), shares them
// through S3 under s3://<bucket>/<prefix>/<sku-key>/<component>/ with one index object per SKU,
// restores the SKU's bundles at start and periodically, and keeps the trees under a byte budget by
// evicting least-recently-used bundles no running pod uses.
//
// It does not own the SKU fingerprint (pkg/nvml computes it; this package takes it as a string), the
// S3 client (pkg/objstore), or reading vLLM logs (pkg/phases reports starts to ReportStart).
//
// Why one tree per SKU and not per image: vLLM's torch_compile_cache/<hash> dirs, Triton's hashed dirs,
// Inductor's FX cache and FlashInfer's <version>/<arch> dirs each carry their own key over the torch,
// Triton, CUDA toolkit, vLLM and FlashInfer versions (reference/vllm-startup-and-caches.md §3.5), so
// images of different versions share a tree without ever reading each other's entries. What those
// keys do not cover is the GPU product name for some caches and the driver; the SKU key covers those.
package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/model"
)

// Component names: the four caches a vLLM pod writes, each its own subtree and bundle stream.
const (
	ComponentVLLM       = "vllm"
	ComponentInductor   = "inductor"
	ComponentTriton     = "triton"
	ComponentFlashInfer = "flashinfer"
)

// Components lists every component in a stable order.
var Components = []string{ComponentVLLM, ComponentInductor, ComponentTriton, ComponentFlashInfer}

// NodeLink is the symlink under compile-cache/ that names this node's SKU tree. Pod specs mount it
// by a path that is the same on every node, whatever the node's SKU.
const NodeLink = "node"

// PodMountPath is where `warmd cache env` mounts the node's tree inside a pod.
const PodMountPath = "/warmd/compile-cache"

var skuRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// CheckSKU refuses keys that cannot name a tree and a bucket prefix, and the keys pkg/nvml uses for
// "no GPU" and "identity unreadable", which must never key a cache.
func CheckSKU(sku string) error {
	switch sku {
	case "", "none", "unknown":
		return fmt.Errorf("SKU key %q does not identify a GPU: compile caches are only kept on nodes whose GPU identity was read (check `warmd status` GPU section)", sku)
	}
	if !skuRe.MatchString(sku) || strings.Contains(sku, "..") || sku == NodeLink {
		return fmt.Errorf("SKU key %q is not a safe path element: use letters, digits, '.', '_' and '-' only", sku)
	}
	return nil
}

// Layout names the paths of one node's compile caches.
type Layout struct {
	// Base is <dataDir>/compile-cache.
	Base string
	SKU  string
}

// NewLayout returns the layout for dataDir and sku.
func NewLayout(dataDir, sku string) (Layout, error) {
	if err := CheckSKU(sku); err != nil {
		return Layout{}, err
	}
	return Layout{Base: filepath.Join(dataDir, "compile-cache"), SKU: sku}, nil
}

// Root is the SKU's tree.
func (l Layout) Root() string { return filepath.Join(l.Base, l.SKU) }

// Dir is one component's tree.
func (l Layout) Dir(component string) string { return filepath.Join(l.Root(), component) }

// Records is where the bundle records of this SKU live.
func (l Layout) Records() string { return filepath.Join(l.Base, ".bundles", l.SKU) }

// roots are a manager's handles on its layout. All are fsroot Roots: the SKU tree is pod-written and
// hostile, and the rest is warmd's own, reached without following a link either.
type roots struct {
	base *fsroot.Root // <dataDir>/compile-cache
	tree *fsroot.Root // <base>/<sku>: what pods mount read-write
	recs *fsroot.Root // <base>/.bundles/<sku>
}

func (r *roots) close() {
	for _, x := range []*fsroot.Root{r.tree, r.recs, r.base} {
		if x != nil {
			x.Close()
		}
	}
}

// open opens the layout's roots; with create it also makes the trees and points the node link at
// this SKU's tree (Ensure), otherwise it only opens what exists (commands that read).
func (l Layout) open(create bool, log *slog.Logger) (*roots, error) {
	r := &roots{}
	var err error
	if create {
		r.base, err = fsroot.Open(l.Base)
	} else {
		r.base, err = openExisting(l.Base)
	}
	if err != nil {
		return nil, fmt.Errorf("open compile-cache dir: %w", err)
	}
	sku := fsroot.MustPath(l.SKU) // CheckSKU made it one safe element
	recs := fsroot.MustPath(".bundles/" + l.SKU)
	if create {
		if err := l.ensure(r.base, sku, log); err != nil {
			r.close()
			return nil, err
		}
	}
	if r.tree, err = subExisting(r.base, sku); err == nil {
		r.recs, err = subExisting(r.base, recs)
		if !create && errors.Is(err, fs.ErrNotExist) {
			err = nil // a tree no daemon ever recorded bundles of: nothing to list, still exportable
		}
	}
	if err != nil {
		r.close()
		return nil, fmt.Errorf("open compile-cache tree: %w", err)
	}
	return r, nil
}

// ensure creates the trees and points the node link at this SKU's tree. A component dir a pod
// replaced by a link (or a file) is put back as a dir: the link is removed itself, never followed.
func (l Layout) ensure(base *fsroot.Root, sku fsroot.Path, log *slog.Logger) error {
	for _, c := range Components {
		p := sku.Join(fsroot.MustPath(c))
		err := base.MkdirAll(p, 0o755)
		if errors.Is(err, fsroot.ErrSymlink) || errors.Is(err, syscall.ENOTDIR) {
			log.Warn("a compile-cache component dir was replaced by a link or a file (by a pod?); removing it and recreating the dir", "path", base.Name(p))
			if err = base.RemoveAll(p); err == nil {
				err = base.MkdirAll(p, 0o755)
			}
		}
		if err != nil {
			return fmt.Errorf("create compile-cache tree: %w", err)
		}
	}
	if err := base.MkdirAll(fsroot.MustPath(".bundles/"+l.SKU), 0o755); err != nil {
		return fmt.Errorf("create compile-cache records: %w", err)
	}
	link, tmp := fsroot.MustPath(NodeLink), fsroot.MustPath(NodeLink+".warmd-new")
	if cur, err := base.Readlink(link); err == nil && cur == l.SKU {
		return nil
	}
	_ = base.RemoveAll(tmp)
	if err := base.Symlink(l.SKU, tmp); err != nil {
		return fmt.Errorf("point %s at %s: %w", base.Name(link), l.SKU, err)
	}
	if err := base.Rename(tmp, link); err != nil {
		_ = base.Remove(tmp)
		return fmt.Errorf("point %s at %s: %w (remove it if it is not a symlink)", base.Name(link), l.SKU, err)
	}
	return nil
}

// Ensure creates the trees and points the node link at this SKU's tree.
func (l Layout) Ensure() error {
	r, err := l.open(true, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	r.close()
	return nil
}

// ReadNodeLink returns the SKU the node link of the compile-cache dir under dataDir names, checked
// like any SKU key (the link is warmd's, but a reader must not take a tampered one as a path).
func ReadNodeLink(dataDir string) (string, error) {
	base, err := openExisting(filepath.Join(dataDir, "compile-cache"))
	if err != nil {
		return "", err
	}
	defer base.Close()
	sku, err := base.Readlink(fsroot.MustPath(NodeLink))
	if err != nil {
		return "", err
	}
	if err := CheckSKU(sku); err != nil {
		return "", fmt.Errorf("%s does not name a SKU tree: %w", base.Name(fsroot.MustPath(NodeLink)), err)
	}
	return sku, nil
}

// openExisting opens dir as a Root without creating it.
func openExisting(dir string) (*fsroot.Root, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	return fsroot.Open(dir)
}

// subExisting opens p below r without creating it.
func subExisting(r *fsroot.Root, p fsroot.Path) (*fsroot.Root, error) {
	fi, err := r.Lstat(p)
	if err != nil {
		return nil, err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("%s: %w", r.Name(p), fsroot.ErrSymlink)
	case !fi.IsDir():
		return nil, fmt.Errorf("%s: %w", r.Name(p), syscall.ENOTDIR)
	}
	return r.Sub(p)
}

// EnvVar is one environment variable a vLLM pod sets.
type EnvVar struct {
	Name, Value, Why string
}

// PodEnv lists the variables that point a pod's caches into the tree mounted at mount.
//
// vLLM redirects Triton and Inductor into its own tree when its compile cache is on: its
// InductorAdaptor sets TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR to
// $VLLM_CACHE_ROOT/torch_compile_cache/<hash>/rank_i_j/{inductor_cache,triton_cache}, and the
// standalone and AOT modes save their artifacts under the same root. Those files are captured as part
// of the vllm component. The inductor and triton variables still matter: vLLM with
// VLLM_DISABLE_COMPILE_CACHE=1, other torch.compile users in the pod, and kernels Triton builds outside
// vLLM's compile (custom ops, sampling kernels) write there. Both shapes are captured.
//
// With a model name, VLLM_CACHE_ROOT gets a per-model subdir (vllm/models/<slug>): vLLM's hash dirs
// already keep models apart, but a per-model root lets the daemon see which model's tree a running
// pod uses (InUse) and evict other models' trees first. Triton, Inductor and FlashInfer stay shared:
// their entries are per kernel, and models reuse each other's kernels.
// A name that is not a valid model id is an error: its tree could not be told apart from another's.
func PodEnv(mount, name string) ([]EnvVar, error) {
	vllm := mount + "/" + ComponentVLLM
	if name != "" {
		tree, err := ModelTree(name)
		if err != nil {
			return nil, err
		}
		vllm = mount + "/" + tree
	}
	return []EnvVar{
		{"VLLM_CACHE_ROOT", vllm, "vLLM torch.compile cache (torch_compile_cache/<hash>/…; also holds the Inductor/Triton files vLLM redirects there)"},
		{"TORCHINDUCTOR_CACHE_DIR", mount + "/" + ComponentInductor, "Inductor FX/AOTAutograd caches outside vLLM's own tree"},
		{"TRITON_CACHE_DIR", mount + "/" + ComponentTriton, "Triton kernels outside vLLM's own tree"},
		{"FLASHINFER_WORKSPACE_BASE", mount + "/" + ComponentFlashInfer, "FlashInfer JIT: <base>/.cache/flashinfer/<version>/<arch>/cached_ops/<op>/<op>.so"},
	}, nil
}

// ModelTree is one model's vLLM cache root below the cache root, vllm/models/<model.Slug>: where
// PodEnv points a pod's VLLM_CACHE_ROOT, and what InUse names for a running model.
func ModelTree(name string) (string, error) {
	slug, err := model.Slug(name)
	if err != nil {
		return "", fmt.Errorf("per-model vLLM cache root: %w", err)
	}
	return ComponentVLLM + "/models/" + slug, nil
}
