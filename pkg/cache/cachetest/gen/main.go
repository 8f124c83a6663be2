// Command gen writes a synthetic compile-cache tree (pkg/cache/cachetest) for benchmarks:
//
//	go run ./pkg/cache/cachetest/gen -out DIR [-spec bench|node|small]
package main

import (
	"flag"
	"fmt"
	"os"

	"warmd.io/warmd/pkg/cache/cachetest"
)

func main() {
	out := flag.String("out", "", "dir to write the tree into (its vllm, inductor, triton, flashinfer subdirs)")
	spec := flag.String("spec", "bench", "bench (~20,000 files, ~2 GiB), node (~10,000 files, ~1 GiB) or small")
	flag.Parse()
	s, ok := map[string]cachetest.Spec{"bench": cachetest.Bench, "node": cachetest.Node, "small": cachetest.Small}[*spec]
	if *out == "" || !ok {
		fmt.Fprintln(os.Stderr, "usage: gen -out DIR [-spec bench|node|small]")
		os.Exit(2)
	}
	files, err := cachetest.Write(*out, s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	fmt.Println(len(files))
}
