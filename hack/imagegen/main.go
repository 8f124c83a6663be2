// Command imagegen pushes a generated image of incompressible layers to a registry, for the image
// benchmark (scripts/bench/images.sh). It prints the pushed reference's digest on its last line.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	ref := flag.String("ref", "", "where to push, host:port/repo:tag (plain HTTP)")
	layers := flag.Int("layers", 5, "number of layers")
	size := flag.Int64("layer-size", 100<<20, "bytes of random data per layer")
	seed := flag.Uint64("seed", 1, "random seed (same seed, same image)")
	flag.Parse()
	if err := run(*ref, *layers, *size, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "imagegen:", err)
		os.Exit(1)
	}
}

func run(ref string, layers int, size int64, seed uint64) error {
	if ref == "" {
		return fmt.Errorf("--ref is required (e.g. 127.0.0.1:5000/warmd-bench/images:500m)")
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return fmt.Errorf("--ref %q: %w", ref, err)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	img := empty.Image
	for i := range layers {
		data := make([]byte, size)
		for j := 0; j+8 <= len(data); j += 8 {
			v := rng.Uint64()
			for k := range 8 {
				data[j+k] = byte(v >> (8 * k))
			}
		}
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("layer%d.bin", i), Mode: 0o644, Size: size}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
		if err := tw.Close(); err != nil {
			return err
		}
		// Incompressible data: an uncompressed OCI layer is what gzip would produce anyway, minus the
		// CPU; static keeps the blob exactly these bytes.
		l := static.NewLayer(buf.Bytes(), types.OCIUncompressedLayer)
		var err error
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return err
		}
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	if err := remote.Write(r, img); err != nil {
		return fmt.Errorf("push %s: %w", r, err)
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Println(d.String())
	return nil
}
