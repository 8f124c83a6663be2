package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/klauspost/compress/flate"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// vllmShape is the relative size of each layer of a vLLM serving image (uncompressed): a CUDA base
// (OS, apt packages, CUDA runtime and libraries), Python, then the pip layer holding torch, vLLM,
// flash-attn and friends (the multi-GB one), then small application layers. Sizes are scaled so the
// big layer gets bigLayer uncompressed bytes.
var vllmShape = []float64{
	0.018, // ubuntu base
	0.040, // apt: build essentials, ca-certificates
	0.002, // env and users
	0.120, // cuda runtime
	0.160, // cuda libraries (cublas, cudnn)
	0.030, // python
	0.001, // pip config
	1.000, // pip install torch vllm flash-attn ...
	0.025, // nccl, extra wheels
	0.004, // app code
	0.001, // entrypoint
	0.002, // licenses
	0.001, // labels and config files
}

// genLayer is a generated gzip layer kept in a file until pushed.
type genLayer struct {
	path         string
	digest, diff v1.Hash
	size, usize  int64
}

var _ v1.Layer = (*genLayer)(nil)

func (l *genLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *genLayer) DiffID() (v1.Hash, error)            { return l.diff, nil }
func (l *genLayer) Size() (int64, error)                { return l.size, nil }
func (l *genLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l *genLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }
func (l *genLayer) Uncompressed() (io.ReadCloser, error) {
	return nil, fmt.Errorf("not needed to push")
}

// realisticLayers writes the vLLM-shaped gzip layers into dir, the biggest with bigLayer uncompressed
// bytes. Everything derives from seed. Files inside each layer have sizes like a Python environment's
// (many small .py files, some .so files of tens of MiB) and content that deflate shrinks about 2:1:
// each 4 KiB block is part random bytes, part text-like runs drawn from a small vocabulary.
func realisticLayers(dir string, bigLayer int64, seed uint64) ([]*genLayer, error) {
	var out []*genLayer
	for i, f := range vllmShape {
		target := int64(f * float64(bigLayer))
		if target < 64<<10 {
			target = 64 << 10
		}
		l, err := writeLayer(filepath.Join(dir, fmt.Sprintf("layer%02d.tar.gz", i)), i, target, seed+uint64(i)*7919)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// writeLayer streams one layer's tar through a parallel gzip writer into path.
func writeLayer(path string, idx int, target int64, seed uint64) (*genLayer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ch := sha256.New()
	pg := newParallelGzip(io.MultiWriter(f, ch), runtime.GOMAXPROCS(0))
	uh := sha256.New()
	cnt := &countWriter{}
	tw := tar.NewWriter(io.MultiWriter(pg, uh, cnt))
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var written int64
	for n := 0; written < target; n++ {
		size := fileSize(rng)
		if size > target-written {
			size = max(target-written, 1)
		}
		name := fmt.Sprintf("usr/lib/python3/site-packages/pkg%02d_%03d/mod_%06d", idx, n/200, n)
		if size > 1<<20 {
			name += ".so"
		} else {
			name += ".py"
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if err := fillContent(tw, rng, size); err != nil {
			return nil, err
		}
		written += size
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := pg.Close(); err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return &genLayer{
		path:   path,
		digest: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", ch.Sum(nil))},
		diff:   v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", uh.Sum(nil))},
		size:   st.Size(),
		usize:  cnt.n,
	}, f.Close()
}

// fileSize draws a file size: 70 % small sources (1-32 KiB), 25 % medium (32 KiB-1 MiB), 5 % shared
// objects (1-64 MiB).
func fileSize(rng *rand.Rand) int64 {
	switch p := rng.IntN(100); {
	case p < 70:
		return 1<<10 + rng.Int64N(31<<10)
	case p < 95:
		return 32<<10 + rng.Int64N(992<<10)
	default:
		return 1<<20 + rng.Int64N(63<<20)
	}
}

var vocab = []string{"import ", "torch", "def ", "return ", "self.", "__init__", "cuda", "tensor",
	"\n    ", "(x, y)", "kernel_", "0x7f", "\x00\x00\x00\x00", "\x48\x89\xe5", "GLIBC_2.17", ".text"}

// fillContent writes size bytes: per 4 KiB block, the first 1200 bytes random, the rest vocabulary
// runs (deflate at level 1 brings the whole to roughly half).
func fillContent(w io.Writer, rng *rand.Rand, size int64) error {
	var blk [4096]byte
	for size > 0 {
		j := 0
		for ; j+8 <= 1200; j += 8 {
			binary.LittleEndian.PutUint64(blk[j:], rng.Uint64())
		}
		for j < len(blk) {
			v := rng.Uint64()
			j += copy(blk[j:], vocab[v&15])
			j += copy(blk[j:], vocab[(v>>4)&15])
		}
		n := int64(len(blk))
		if n > size {
			n = size
		}
		if _, err := w.Write(blk[:n]); err != nil {
			return err
		}
		size -= n
	}
	return nil
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// parallelGzip is a pigz-style writer: one gzip member whose deflate stream is cut into 1 MiB
// chunks compressed independently on every core (each ending in a sync flush, so they concatenate),
// written in order. The result is an ordinary single-member gzip stream any reader accepts.
type parallelGzip struct {
	w     io.Writer
	buf   []byte
	crc   hash.Hash32
	size  uint32
	jobs  chan *gzChunk
	order chan *gzChunk
	done  chan error
}

type gzChunk struct {
	in   []byte
	last bool
	out  bytes.Buffer
	err  error
	wg   sync.WaitGroup
}

const chunkSize = 1 << 20

func newParallelGzip(w io.Writer, workers int) *parallelGzip {
	p := &parallelGzip{w: w, crc: crc32.NewIEEE(), jobs: make(chan *gzChunk, workers*2),
		order: make(chan *gzChunk, workers*2), done: make(chan error, 1)}
	for range workers {
		go func() {
			for c := range p.jobs {
				fw, err := flate.NewWriter(&c.out, flate.BestSpeed)
				if err == nil {
					_, err = fw.Write(c.in)
				}
				if err == nil {
					if c.last {
						err = fw.Close()
					} else {
						err = fw.Flush()
					}
				}
				c.err = err
				c.wg.Done()
			}
		}()
	}
	go func() {
		// header: gzip magic, deflate, no flags, mtime 0, no extra flags, OS unknown
		_, err := p.w.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255})
		for c := range p.order {
			c.wg.Wait()
			if err == nil {
				err = c.err
			}
			if err == nil {
				_, err = p.w.Write(c.out.Bytes())
			}
		}
		p.done <- err
	}()
	return p
}

func (p *parallelGzip) submit(last bool) {
	c := &gzChunk{in: p.buf, last: last}
	c.wg.Add(1)
	p.buf = nil
	p.order <- c
	p.jobs <- c
}

func (p *parallelGzip) Write(b []byte) (int, error) {
	n := len(b)
	p.crc.Write(b)
	p.size += uint32(len(b))
	for len(b) > 0 {
		if p.buf == nil {
			p.buf = make([]byte, 0, chunkSize)
		}
		k := min(chunkSize-len(p.buf), len(b))
		p.buf = append(p.buf, b[:k]...)
		b = b[k:]
		if len(p.buf) == chunkSize {
			p.submit(false)
		}
	}
	return n, nil
}

// Close compresses what is buffered as the final block and writes the gzip trailer.
func (p *parallelGzip) Close() error {
	p.submit(true)
	close(p.jobs)
	close(p.order)
	if err := <-p.done; err != nil {
		return err
	}
	var tr [8]byte
	binary.LittleEndian.PutUint32(tr[:4], p.crc.Sum32())
	binary.LittleEndian.PutUint32(tr[4:], p.size)
	_, err := p.w.Write(tr[:])
	return err
}
