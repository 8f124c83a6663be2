package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	dockerconfig "github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/containerd/v2/core/transfer"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"warmd.io/warmd/pkg/prefetch"
)

// maxManifest bounds a manifest or index read into memory; real ones are a few KiB.
const maxManifest = 8 << 20

// Registry is how warmd reaches registries from the client side.
type Registry struct {
	Auth Auth
	// HostsDir is a containerd hosts.toml config dir (<dir>/<host>/hosts.toml); ignored when absent.
	HostsDir string
	// PlainHTTP lists host:port registries reached over plain HTTP besides loopback ones.
	PlainHTTP []string
	// Platform is the node's platform; only its manifest is pulled from a multi-platform index.
	Platform ocispec.Platform
}

// Ref is a parsed image reference.
type Ref struct {
	// Name is the normalized reference (docker.io/library/vllm:v1, host:5000/x@sha256:…).
	Name string
	// Repo is the name without tag or digest.
	Repo string
	// Host is the registry host (docker.io for Docker Hub).
	Host string
	// Digest is set for by-digest references.
	Digest digest.Digest
}

// ParseRef normalizes ref the way the CRI does, so the name warmd stores is the name pods use.
func ParseRef(ref string) (Ref, error) {
	n, err := reference.ParseDockerRef(strings.TrimSpace(ref))
	if err != nil {
		return Ref{}, fmt.Errorf("image %q is not a valid reference (%w): use e.g. docker.io/vllm/vllm-openai:v0.11.0 or repo@sha256:…", ref, err)
	}
	r := Ref{Name: n.String(), Repo: n.Name(), Host: reference.Domain(n)}
	if d, ok := n.(reference.Digested); ok {
		r.Digest = d.Digest()
	}
	return r, nil
}

// IsPlainHTTP says whether host is reached over plain HTTP: loopback always, others only when listed.
func (r Registry) IsPlainHTTP(host string) bool {
	if docker.IsLocalhost(host) {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil && net.ParseIP(h).IsLoopback() {
		return true
	}
	return slices.Contains(r.PlainHTTP, host)
}

// DefaultScheme is the scheme for host when hosts.toml says nothing ("http" or "").
func (r Registry) DefaultScheme(host string) string {
	if r.IsPlainHTTP(host) {
		return "http"
	}
	return ""
}

// HostsDirIfPresent returns HostsDir when it exists, else "" (containerd errors on a missing dir
// only in some versions; a node without mirrors simply has none).
func (r Registry) HostsDirIfPresent() string {
	if r.HostsDir == "" {
		return ""
	}
	if st, err := os.Stat(r.HostsDir); err != nil || !st.IsDir() {
		return ""
	}
	return r.HostsDir
}

// Resolver returns a client-side docker resolver for host with credentials, hosts.toml and the
// plain-HTTP rule applied.
func (r Registry) Resolver(ctx context.Context, host string) remotes.Resolver {
	opts := dockerconfig.HostOptions{
		Credentials:   r.Auth.Credentials,
		DefaultScheme: r.DefaultScheme(host),
	}
	if dir := r.HostsDirIfPresent(); dir != "" {
		opts.HostDir = dockerconfig.HostDirFromRoot(dir)
	}
	return docker.NewResolver(docker.ResolverOptions{Hosts: dockerconfig.ConfigureHosts(ctx, opts)})
}

// Resolve asks the registry what ref points at and walks to the node platform's manifest.
func (r Registry) Resolve(ctx context.Context, ref string) (prefetch.Resolved, error) {
	pr, err := ParseRef(ref)
	if err != nil {
		return prefetch.Resolved{}, err
	}
	res := r.Resolver(ctx, pr.Host)
	name, target, err := res.Resolve(ctx, pr.Name)
	if err != nil {
		return prefetch.Resolved{}, fmt.Errorf("resolve %s: %w", pr.Name, err)
	}
	fetcher, err := res.Fetcher(ctx, name)
	if err != nil {
		return prefetch.Resolved{}, fmt.Errorf("fetcher for %s: %w", name, err)
	}
	out := prefetch.Resolved{Name: pr.Name, Target: target, ByDigest: pr.Digest != ""}
	out.Manifest, out.Config, out.Layers, err = Walk(ctx, fetcher, target, r.Platform)
	if err != nil {
		return prefetch.Resolved{}, fmt.Errorf("resolve %s: %w", pr.Name, err)
	}
	return out, nil
}

// Walk reads target (an index or a manifest) and returns the platform's manifest, config and layers.
func Walk(ctx context.Context, f remotes.Fetcher, target ocispec.Descriptor, p ocispec.Platform) (ocispec.Descriptor, ocispec.Descriptor, []ocispec.Descriptor, error) {
	desc := target
	match := platforms.Only(p)
	for depth := 0; depth < 4; depth++ {
		data, err := ReadBlob(ctx, f, desc)
		if err != nil {
			return desc, ocispec.Descriptor{}, nil, err
		}
		switch {
		case images.IsIndexType(desc.MediaType):
			var idx ocispec.Index
			if err := json.Unmarshal(data, &idx); err != nil {
				return desc, ocispec.Descriptor{}, nil, fmt.Errorf("index %s: %w", desc.Digest, err)
			}
			var cands []ocispec.Descriptor
			var seen []string
			for _, m := range idx.Manifests {
				if m.Platform == nil {
					continue
				}
				seen = append(seen, platforms.Format(*m.Platform))
				if match.Match(*m.Platform) {
					cands = append(cands, m)
				}
			}
			if len(cands) == 0 {
				return desc, ocispec.Descriptor{}, nil, fmt.Errorf("index %s has no manifest for this node's platform %s (it has %s): publish one or use another image",
					desc.Digest, platforms.Format(p), strings.Join(seen, ", "))
			}
			slices.SortStableFunc(cands, func(a, b ocispec.Descriptor) int {
				if match.Less(*a.Platform, *b.Platform) {
					return -1
				}
				if match.Less(*b.Platform, *a.Platform) {
					return 1
				}
				return 0
			})
			desc = cands[0]
		case images.IsManifestType(desc.MediaType):
			var m ocispec.Manifest
			if err := json.Unmarshal(data, &m); err != nil {
				return desc, ocispec.Descriptor{}, nil, fmt.Errorf("manifest %s: %w", desc.Digest, err)
			}
			return desc, m.Config, m.Layers, nil
		default:
			return desc, ocispec.Descriptor{}, nil, fmt.Errorf("%s has media type %q, not an image index or manifest", desc.Digest, desc.MediaType)
		}
	}
	return desc, ocispec.Descriptor{}, nil, fmt.Errorf("index nesting under %s is too deep", target.Digest)
}

// ReadBlob fetches a small blob and verifies its digest.
func ReadBlob(ctx context.Context, f remotes.Fetcher, desc ocispec.Descriptor) ([]byte, error) {
	if desc.Size > maxManifest {
		return nil, fmt.Errorf("%s is %d bytes, over the %d-byte limit for manifests", desc.Digest, desc.Size, maxManifest)
	}
	rc, err := f.Fetch(ctx, desc)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", desc.Digest, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, desc.Size+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", desc.Digest, err)
	}
	if int64(len(data)) != desc.Size || desc.Digest.Algorithm().FromBytes(data) != desc.Digest {
		return nil, fmt.Errorf("%s: content does not match its digest (%d bytes read, %d expected)", desc.Digest, len(data), desc.Size)
	}
	return data, nil
}

// FixedResolver makes base resolve name to exactly desc, so a pull stores the digest warmd resolved
// under the tag even if the tag moves between resolve and pull.
func FixedResolver(base remotes.Resolver, name string, desc ocispec.Descriptor) remotes.Resolver {
	return &fixedResolver{Resolver: base, name: name, desc: desc}
}

type fixedResolver struct {
	remotes.Resolver
	name string
	desc ocispec.Descriptor
}

func (f *fixedResolver) Resolve(ctx context.Context, ref string) (string, ocispec.Descriptor, error) {
	if ref == f.name {
		return f.name, f.desc, nil
	}
	return f.Resolver.Resolve(ctx, ref)
}

// SetOptions passes download limits through to the wrapped resolver (client.Pull sets them).
func (f *fixedResolver) SetOptions(opts ...transfer.ImageResolverOption) {
	if r, ok := f.Resolver.(remotes.ResolverWithOptions); ok {
		r.SetOptions(opts...)
	}
}
