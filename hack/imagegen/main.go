// Command imagegen pushes a generated image to a registry, for the image benchmark
// (scripts/bench/images.sh). It prints the pushed reference's digest on its last line.
//
// Two modes: "small" (the quick one) is a few uncompressed layers of random bytes; "realistic" is
// shaped like a vLLM serving image: 13 gzip layers, one of them multi-GB, holding many files whose
// content compresses about 2:1 like wheels and shared objects do, so a pull pays for gunzip and for
// creating files as it does on a real node.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
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
	mode := flag.String("mode", "small", "small (uncompressed random layers) or realistic (vLLM-shaped gzip layers)")
	big := flag.Int64("big-layer", 4608<<20, "realistic: uncompressed bytes of the biggest layer (the others scale with it)")
	tmp := flag.String("tmp", os.TempDir(), "realistic: where the compressed layers are kept until pushed (removed after)")
	flag.Parse()
	var err error
	switch *mode {
	case "small":
		err = run(*ref, *layers, *size, *seed)
	case "realistic":
		err = runRealistic(*ref, *big, *seed, *tmp)
	default:
		err = fmt.Errorf("--mode %q is not small or realistic", *mode)
	}
	if err != nil {
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
	return push(r, img)
}

// runRealistic generates the vLLM-shaped layers into a temp dir under tmp, reports their sizes and
// compression ratio on stderr, and pushes them.
func runRealistic(ref string, big int64, seed uint64, tmp string) error {
	if ref == "" {
		return fmt.Errorf("--ref is required (e.g. 127.0.0.1:5000/warmd-bench/images:vllm)")
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return fmt.Errorf("--ref %q: %w", ref, err)
	}
	dir, err := os.MkdirTemp(tmp, "imagegen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	ls, err := realisticLayers(dir, big, seed)
	if err != nil {
		return err
	}
	img := empty.Image
	var csum, usum, cmax int64
	for i, l := range ls {
		csum += l.size
		usum += l.usize
		cmax = max(cmax, l.size)
		fmt.Fprintf(os.Stderr, "imagegen: layer %2d: %6d MiB gzip, %6d MiB tar, ratio %.2f\n", i, l.size>>20, l.usize>>20, float64(l.usize)/float64(l.size))
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "imagegen: %d gzip layers, %d MiB compressed (largest %d MiB), %d MiB uncompressed, ratio %.2f, generated in %.1fs\n",
		len(ls), csum>>20, cmax>>20, usum>>20, float64(usum)/float64(csum), time.Since(t0).Seconds())
	return push(r, img)
}

// push gives img an OCI manifest and a linux config for this machine's architecture and writes it.
func push(r name.Reference, img v1.Image) error {
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
	t0 := time.Now()
	if err := remote.Write(r, img); err != nil {
		return fmt.Errorf("push %s: %w", r, err)
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "imagegen: pushed %s in %.1fs\n", r, time.Since(t0).Seconds())
	fmt.Println(d.String())
	return nil
}
