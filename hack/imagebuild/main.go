// Command imagebuild assembles warmd's multi-arch OCI image without a container engine: for each
// platform it takes the cgo warmd binary, reads the dynamic loader and every shared library it needs
// from its ELF headers (PT_INTERP, DT_NEEDED, transitively), copies exactly those from the platform's
// sysroot, adds CA certificates, root and nonroot users and the package metadata scanners read, and
// writes an OCI image index (linux/amd64, linux/arm64) with OCI labels as an OCI layout; optionally
// it pushes the index to a registry. `verify` unpacks each platform and runs the binary in a chroot
// holding only the image (under qemu-user for the foreign architecture).
//
// scripts/image.sh (`make image`) builds the binaries and calls it; the same inputs give the same
// digest (sorted entries, fixed timestamps from the commit, numeric owners).
//
//	imagebuild build --out _output/image --tag v0.1.0 --version v0.1.0 --revision SHA \
//	  --source https://github.com/warmd/warmd --created 2026-01-01T00:00:00Z \
//	  --binary linux/amd64=_output/bin/linux_amd64/warmd --binary linux/arm64=_output/bin/linux_arm64/warmd \
//	  --sysroot linux/arm64=SYSROOT [--push 127.0.0.1:5000/warmd/warmd:v0.1.0]
//	imagebuild verify --layout _output/image --version v0.1.0
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

// kv is a repeatable KEY=VALUE flag.
type kv map[string]string

func (m kv) String() string { return fmt.Sprint(map[string]string(m)) }
func (m kv) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("want PLATFORM=PATH, got %q", s)
	}
	if _, err := platformName(k); err != nil {
		return err
	}
	m[k] = v
	return nil
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: imagebuild build|verify [flags] (see hack/imagebuild/main.go)")
	}
	switch args[0] {
	case "build":
		o := buildOptions{Binaries: kv{}, Sysroots: kv{}, Log: os.Stderr}
		fs := flag.NewFlagSet("build", flag.ContinueOnError)
		fs.StringVar(&o.Out, "out", "_output/image", "OCI layout directory to write (replaced)")
		fs.StringVar(&o.Tag, "tag", "", "tag recorded in the layout (org.opencontainers.image.ref.name)")
		fs.Var(kv(o.Binaries), "binary", "PLATFORM=PATH of the warmd binary (repeat per platform)")
		fs.Var(kv(o.Sysroots), "sysroot", "PLATFORM=DIR the platform's libraries are copied from (default /)")
		fs.StringVar(&o.CABundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA certificates to ship")
		fs.StringVar(&o.Version, "version", "", "org.opencontainers.image.version")
		fs.StringVar(&o.Revision, "revision", "", "org.opencontainers.image.revision (git commit)")
		fs.StringVar(&o.Source, "source", "", "org.opencontainers.image.source (repository URL)")
		created := fs.String("created", "", "RFC 3339 time for every timestamp (the commit's, for reproducible digests)")
		fs.StringVar(&o.Push, "push", "", "registry/repository:tag to push the index to")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			return fmt.Errorf("--created %q: %w", *created, err)
		}
		o.Created = t
		if o.Tag == "" {
			o.Tag = o.Version
		}
		res, err := build(ctx, o)
		if err != nil {
			return err
		}
		var plats []string
		for _, p := range res.Platforms {
			plats = append(plats, p.Platform)
		}
		where := o.Out
		if o.Push != "" {
			where = o.Push
		}
		// The summary line scripts and people read (scripts/image.sh prints it last).
		fmt.Printf("image: %s platforms %s digest %s\n", where, strings.Join(plats, ","), res.Digest)
		return nil
	case "verify":
		o := verifyOptions{Log: os.Stderr}
		fs := flag.NewFlagSet("verify", flag.ContinueOnError)
		fs.StringVar(&o.Layout, "layout", "_output/image", "OCI layout directory")
		fs.StringVar(&o.Version, "version", "", "version `warmd version` must print")
		plats := fs.String("platforms", "linux/amd64,linux/arm64", "platforms that must be present and run")
		fs.StringVar(&o.QemuDir, "qemu-dir", "", "directory of qemu-<arch>-static (default: PATH)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if o.Version == "" {
			return fmt.Errorf("--version is required")
		}
		o.Platforms = strings.Split(*plats, ",")
		return verify(ctx, o)
	}
	return fmt.Errorf("unknown command %q (want build or verify)", args[0])
}
