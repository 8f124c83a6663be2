// Package bundle owns the compile-cache bundle format: a deterministic tar stream compressed with zstd
// (klauspost/compress) whose last entry is a JSON manifest naming the SKU, the component, the versions
// readable from the tree and every file with its size and sha256. A bundle is named by the sha256 of its
// compressed bytes, so the same name always means the same content.
//
// The reader is the security boundary: bundles come from a shared bucket or an operator's USB stick,
// and vLLM's own docs say "do not copy cache contents from untrusted sources"; the tree it writes into
// is mounted read-write by vLLM pods. It rejects absolute paths, `..`, links that could lead out of
// the tree, device files and sparse entries; counts what every entry materialises against its limits
// and the free space before writing it; checks every file's sha256 against the manifest and the
// manifest against the one published with the bundle; writes every file under a temp name through
// pkg/fsroot (never through a link a pod planted) and publishes it only after the whole bundle
// checked out; and never replaces a different existing file. Writer reads the pod-written tree the
// same way, so capture never packs a file from outside it.
//
// It does not own where bundles are stored, which files are complete enough to capture, or the SKU
// fingerprint itself (pkg/cache and pkg/nvml do).
package bundle

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"warmd.io/warmd/pkg/fsroot"
)

// ManifestName is the tar entry holding the manifest; it is always the last entry.
const ManifestName = ".warmd/manifest.json"

// Schema versions the manifest; readers refuse a newer one rather than misread it.
const Schema = 1

// TempMarker is part of every temp file name the reader writes; capture skips such names and a
// restart sweeps them (see IsTemp), so a kill -9 mid-extract leaves only recognizable debris.
const TempMarker = ".warmd-tmp-"

// Ext is the file extension of a bundle.
const Ext = ".tar.zst"

// Manifest describes one bundle. It travels inside the bundle and next to it in the bucket.
type Manifest struct {
	Schema    int       `json:"schema"`
	SKU       string    `json:"sku"`
	Component string    `json:"component"`
	Node      string    `json:"node,omitempty"`
	Created   time.Time `json:"created"`
	// Versions found in the tree (e.g. "flashinfer": "0.4.1", "vllm-cache-hash": "abc123def0").
	Versions map[string][]string `json:"versions,omitempty"`
	// Bytes is the sum of the entries' sizes (uncompressed).
	Bytes   int64   `json:"bytes"`
	Entries []Entry `json:"entries"`
}

// Entry is one file, dir or link in a bundle, relative to the component's root.
type Entry struct {
	Path   string `json:"path"`
	Type   string `json:"type"` // file, dir, symlink
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	Target string `json:"target,omitempty"` // symlinks only
}

// Entry types.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
)

// Errors callers branch on.
var (
	// ErrUnsafe marks a bundle that tried to write outside its tree or create something other than
	// files, dirs and in-tree links.
	ErrUnsafe = errors.New("unsafe bundle entry")
	// ErrTooLarge marks a bundle whose uncompressed size or entry count exceeds the reader's limits.
	ErrTooLarge = errors.New("bundle exceeds size limit")
	// ErrCorrupt marks a truncated or malformed bundle, a wrong digest, or a manifest that does not
	// match the content.
	ErrCorrupt = errors.New("corrupt bundle")
	// ErrRejected marks a well-formed bundle the caller's Check refused (e.g. another SKU's).
	ErrRejected = errors.New("bundle rejected")
)

// IsTemp reports whether a path (or any of its elements) is a temp file the reader writes.
func IsTemp(path string) bool { return strings.Contains(path, TempMarker) }

// SweepTemps removes temp files a killed extraction left anywhere under root; it returns how many it
// removed. It walks by handle and removes by name within each handle (fsroot), so a pod renaming dirs
// or planting links meanwhile cannot turn the sweep into a delete elsewhere.
func SweepTemps(root *fsroot.Root) (int, error) {
	n := 0
	err := root.WalkDir(fsroot.Path{}, func(p fsroot.Path, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !IsTemp(d.Name()) {
			return nil // a name that is not a valid path is not one of ours either
		}
		if root.Remove(p) == nil {
			n++
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("sweep temp files under %s: %w", root.Dir(), err)
	}
	return n, nil
}
