package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildOptions say what goes into the image and where it goes.
type buildOptions struct {
	Out string // OCI layout directory (replaced as a whole)
	Tag string // org.opencontainers.image.ref.name in the layout
	// Binaries maps "linux/<goarch>" to the warmd binary for it; Sysroots to the tree its libraries
	// are copied from ("/" when unset).
	Binaries map[string]string
	Sysroots map[string]string
	CABundle string
	// OCI labels/annotations.
	Version, Revision, Source string
	Created                   time.Time
	// Push, when set, is the registry reference the index is pushed to after the layout is written.
	Push string
	Log  io.Writer
}

// platformResult describes one platform's image.
type platformResult struct {
	Platform   string
	Digest     v1.Hash
	Compressed int64 // layer bytes a node pulls
	Libs       []string
}

type buildResult struct {
	Digest    v1.Hash
	Platforms []platformResult
}

// platformName splits "linux/arm64" into its known arch.
func platformName(p string) (arch, error) {
	osName, goarch, ok := strings.Cut(p, "/")
	a, known := arches[goarch]
	if !ok || osName != "linux" || !known {
		return arch{}, fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", p)
	}
	return a, nil
}

func build(ctx context.Context, o buildOptions) (*buildResult, error) {
	if len(o.Binaries) == 0 {
		return nil, fmt.Errorf("no --binary given: pass --binary linux/amd64=PATH (and linux/arm64=PATH)")
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "warmd",
		"org.opencontainers.image.description": "Keeps GPU nodes warm for vLLM: images, weights and compile caches before a pod needs them",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.base.name":   "scratch",
	}
	for k, v := range labels {
		if v == "" {
			return nil, fmt.Errorf("label %s is empty: pass --version, --revision, --source and --created", k)
		}
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	res := &buildResult{}
	for _, p := range slices.Sorted(maps.Keys(o.Binaries)) {
		img, pr, err := platformImage(p, o, labels)
		if err != nil {
			return nil, err
		}
		a, _ := platformName(p)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: a.goarch, Variant: a.variant},
		}})
		res.Platforms = append(res.Platforms, *pr)
		fmt.Fprintf(o.Log, "imagebuild: %s manifest %s, %s compressed, libs %s\n", p, pr.Digest, mib(pr.Compressed), strings.Join(pr.Libs, " "))
	}
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	d, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	res.Digest = d
	if err := writeLayout(o.Out, o.Tag, idx); err != nil {
		return nil, err
	}
	if o.Push != "" {
		if err := push(ctx, o.Push, idx, o.Log); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// platformImage is two layers: the base (users, certificates, loader, libraries, package metadata),
// which changes only with glibc, and the binary, which changes every commit, so a node pulling a new
// warmd fetches only the second.
func platformImage(p string, o buildOptions, labels map[string]string) (v1.Image, *platformResult, error) {
	a, err := platformName(p)
	if err != nil {
		return nil, nil, err
	}
	bin := o.Binaries[p]
	sr := sysroot{dir: "/"}
	if d := o.Sysroots[p]; d != "" {
		sr.dir = d
	}
	libs, err := elfDeps(bin, a, sr)
	if err != nil {
		return nil, nil, err
	}
	db, err := readDpkg(sr)
	if err != nil {
		return nil, nil, err
	}
	base, err := baseTree(a, libs, db, sr, o.CABundle)
	if err != nil {
		return nil, nil, err
	}
	app := newTree()
	app.copyFile(binPath, 0o755, bin)

	cfg := &v1.ConfigFile{
		Architecture: a.goarch, Variant: a.variant, OS: "linux",
		Created: v1.Time{Time: o.Created.UTC()},
		RootFS:  v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: []string{binPath},
			Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
			User:       fmt.Sprintf("%d:%d", nonrootUID, nonrootUID),
			WorkingDir: "/",
			Labels:     labels,
		},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	pr := &platformResult{Platform: p}
	for _, l := range libs {
		pr.Libs = append(pr.Libs, l.imagePath)
	}
	for _, part := range []struct {
		t       *tree
		comment string
	}{
		{base, "warmd base: users, CA certificates, glibc loader and libraries"},
		{app, "warmd " + o.Version},
	} {
		gz, err := part.t.layer(o.Created)
		if err != nil {
			return nil, nil, err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(gz)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, nil, err
		}
		pr.Compressed += int64(len(gz))
		img, err = mutate.Append(img, mutate.Addendum{
			Layer: layer, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: o.Created.UTC()}, CreatedBy: "hack/imagebuild", Comment: part.comment},
		})
		if err != nil {
			return nil, nil, err
		}
	}
	img = mutate.Annotations(img, labels).(v1.Image)
	if pr.Digest, err = img.Digest(); err != nil {
		return nil, nil, err
	}
	return img, pr, nil
}

// writeLayout writes the index as an OCI image layout next to out and renames it into place, so
// out is never a half-written layout.
func writeLayout(out, tag string, idx v1.ImageIndex) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", tmp, err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return fmt.Errorf("OCI layout %s: %w", tmp, err)
	}
	old := tmp + ".old"
	if err := os.Rename(out, old); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// push writes the index and both images to ref. Loopback and RFC 1918 registries are spoken to
// over plain HTTP (go-containerregistry's rule); credentials come from the Docker config.
func push(ctx context.Context, ref string, idx v1.ImageIndex, log io.Writer) error {
	r, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("IMAGE=%q: %w (want registry/repository:tag)", ref, err)
	}
	updates := make(chan v1.Update, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := time.Time{}
		var u v1.Update
		for u = range updates {
			if time.Since(last) > 2*time.Second {
				fmt.Fprintf(log, "imagebuild: pushing %s: %s of %s\n", r, mib(u.Complete), mib(u.Total))
				last = time.Now()
			}
		}
		if u.Total > 0 {
			fmt.Fprintf(log, "imagebuild: pushed %s: %s\n", r, mib(u.Total))
		}
	}()
	start := time.Now()
	err = remote.WriteIndex(r, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithProgress(updates))
	select { // the writer closes updates when it finishes; an early failure may not have opened it
	case <-done:
	case <-time.After(time.Second):
	}
	if err != nil {
		return fmt.Errorf("push %s: %w", r, err)
	}
	fmt.Fprintf(log, "imagebuild: push took %s\n", time.Since(start).Round(time.Millisecond))
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
