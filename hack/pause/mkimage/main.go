// Command mkimage writes a one-layer image holding a static binary as its entrypoint, as a docker
// image tarball that `ctr images import` reads (scripts/testbin.sh uses it for the test cluster's
// pause image, which must exist before any pod starts and cannot be pulled from the internet here).
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	bin := flag.String("bin", "", "static binary to put at /<its name> as the entrypoint")
	ref := flag.String("ref", "", "image name recorded in the tarball (what ctr imports it as)")
	out := flag.String("o", "", "tarball to write")
	flag.Parse()
	if err := run(*bin, *ref, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(bin, ref, out string) error {
	if bin == "" || ref == "" || out == "" {
		return fmt.Errorf("-bin, -ref and -o are required")
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("-ref %q: %w", ref, err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("read the binary: %w", err)
	}
	base := filepath.Base(bin)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: base, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil })
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	// The config first: AppendLayers then adds the layer's diff ID to its rootfs.
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Config:       v1.Config{Entrypoint: []string{"/" + base}},
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return fmt.Errorf("append layer: %w", err)
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return os.Rename(tmp, out)
}
