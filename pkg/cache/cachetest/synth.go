// Package cachetest builds synthetic compile caches shaped like the real ones (vLLM
// torch_compile_cache/<hash>/rank_0_0/backbone/…, Triton hashed dirs with .json/.cubin/.so, FlashInfer
// <version>/<arch>/cached_ops/<op>/<op>.so with FileLocks), for tests and the benchmark. It owns no
// production code path.
package cachetest

import (
	"encoding/base32"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// Spec sizes a synthetic SKU tree.
type Spec struct {
	// Seed makes the tree reproducible; two trees with the same Seed are identical.
	Seed uint64
	// TritonKernels is the number of Triton kernel dirs (each: .json, .cubin, .ptx, launcher .so).
	TritonKernels int
	// FlashInferOps is the number of FlashInfer JIT ops (each a .so plus build files and a .lock).
	FlashInferOps int
	// VLLMHashes is the number of vLLM torch_compile_cache/<hash> dirs.
	VLLMHashes int
	// BigSO is the size range of FlashInfer .so files; small files stay a few KiB.
	BigSOMin, BigSOMax int64
	// SmallMax bounds Triton/Inductor file sizes.
	SmallMax int64
}

// Small is a quick tree for unit tests (~100 files, ~3 MiB).
var Small = Spec{Seed: 1, TritonKernels: 12, FlashInferOps: 3, VLLMHashes: 1, BigSOMin: 256 << 10, BigSOMax: 512 << 10, SmallMax: 16 << 10}

// Bench is the benchmark's tree: about 20,000 files and 2 GiB.
var Bench = Spec{Seed: 7, TritonKernels: 6000, FlashInferOps: 48, VLLMHashes: 4, BigSOMin: 10 << 20, BigSOMax: 50 << 20, SmallMax: 96 << 10}

// Node is the fresh-node benchmark's tree (scripts/bench/node.sh): Bench's shape at half its counts,
// about 10,000 files and 1 GiB, the compile-cache leg next to a 4 GiB model and its image.
var Node = Spec{Seed: 11, TritonKernels: 3000, FlashInferOps: 26, VLLMHashes: 2, BigSOMin: 10 << 20, BigSOMax: 50 << 20, SmallMax: 96 << 10}

// Write creates the tree under root (root/{vllm,inductor,triton,flashinfer}) and returns the
// files written, relative to root.
func Write(root string, s Spec) ([]string, error) {
	r := rand.New(rand.NewPCG(s.Seed, 0x5eed))
	g := &gen{root: root, r: r, buf: make([]byte, 1<<20)}
	for i := range g.buf {
		g.buf[i] = byte(r.Uint32())
	}
	b32 := base32.StdEncoding.WithPadding(base32.NoPadding)
	for i := range s.TritonKernels {
		key := make([]byte, 32)
		for j := range key {
			key[j] = byte(r.Uint32())
		}
		dir := "triton/" + b32.EncodeToString(key)
		name := fmt.Sprintf("triton_poi_fused_%d", i)
		g.file(dir+"/"+name+".json", 300+r.Int64N(700))
		g.file(dir+"/"+name+".cubin", 2048+r.Int64N(s.SmallMax))
		g.file(dir+"/"+name+".ptx", 1024+r.Int64N(s.SmallMax/2))
		if i%4 == 0 {
			g.file(dir+"/__triton_launcher.so", 16<<10+r.Int64N(s.SmallMax))
		}
	}
	for h := range s.VLLMHashes {
		hash := fmt.Sprintf("%010x", r.Uint64()&0xffffffffff)
		base := "vllm/torch_compile_cache/" + hash + "/rank_0_0"
		g.file(base+"/backbone/vllm_compile_cache.py", 4096+r.Int64N(8192))
		g.file(base+"/backbone/computation_graph.py", 20000+r.Int64N(20000))
		g.file(base+"/backbone/transformed_code.py", 8000+r.Int64N(8000))
		for k := range 40 {
			g.file(fmt.Sprintf("%s/inductor_cache/fxgraph/%02x/f%d/entry", base, r.IntN(256), k), 4096+r.Int64N(s.SmallMax))
			g.file(fmt.Sprintf("%s/triton_cache/K%03d%d/triton_.cubin", base, k, h), 2048+r.Int64N(s.SmallMax))
		}
	}
	for k := range 30 {
		g.file(fmt.Sprintf("inductor/fxgraph/%02x/g%d/entry", r.IntN(256), k), 1024+r.Int64N(s.SmallMax))
		g.file(fmt.Sprintf("inductor/aotautograd/a%d/entry", k), 1024+r.Int64N(s.SmallMax/4))
	}
	fi := "flashinfer/.cache/flashinfer/0.4.1/90a"
	for k := range s.FlashInferOps {
		op := fmt.Sprintf("batch_prefill_with_kv_cache_dtype_q_bf16_head_%d", k)
		g.file(fmt.Sprintf("%s/cached_ops/%s/%s.so", fi, op, op), s.BigSOMin+r.Int64N(s.BigSOMax-s.BigSOMin+1))
		g.file(fmt.Sprintf("%s/cached_ops/%s/build.ninja", fi, op), 2048)
		g.file(fmt.Sprintf("%s/cached_ops/%s/batch_prefill.cuda.o", fi, op), 64<<10+r.Int64N(256<<10))
		g.file(fmt.Sprintf("%s/cached_ops/tmp/%s.lock", fi, op), 0)
		g.file(fmt.Sprintf("%s/generated/%s/batch_prefill_config.inc", fi, op), 1024)
	}
	g.file("flashinfer/.cache/flashinfer/0.4.1/90a/flashinfer_jit.log", 512)
	return g.files, g.err
}

type gen struct {
	root  string
	r     *rand.Rand
	buf   []byte
	files []string
	err   error
}

// file writes size bytes of incompressible data (a window into a random buffer at a random
// offset, so files differ without generating fresh randomness per byte).
func (g *gen) file(rel string, size int64) {
	if g.err != nil {
		return
	}
	p := filepath.Join(g.root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		g.err = err
		return
	}
	f, err := os.Create(p)
	if err != nil {
		g.err = err
		return
	}
	off := g.r.IntN(len(g.buf))
	stamp := []byte(rel)
	f.Write(stamp[:min(int64(len(stamp)), size)])
	for left := size - min(int64(len(stamp)), size); left > 0; {
		n := min(left, int64(len(g.buf)-off))
		if _, err := f.Write(g.buf[off : off+int(n)]); err != nil {
			g.err = err
			break
		}
		left -= n
		off = 0
	}
	if err := f.Close(); err != nil && g.err == nil {
		g.err = err
	}
	if !strings.HasSuffix(rel, ".lock") && !strings.HasSuffix(rel, ".log") {
		g.files = append(g.files, rel)
	}
}
