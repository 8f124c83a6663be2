package compilekey

import (
	"os"
	"path/filepath"
	"testing"

	"warmd.io/warmd/pkg/phases"
)

// TestAgreementOnLogs checks Compare against the compile-cache hash that vLLM printed, over the logs in
// pkg/phases/testdata: for every pair of starts whose logs print both the args line and the hash,
// the inputs of one are compared with the other's (leave-one-out: one plays the cached start, the
// other the pod about to start), and a predicted miss must come with a different hash. A log names
// neither the GPU nor the image digest nor the env, so those inputs are unknown here: a pair equal in
// every printed input is "unknown", never a hit. docs/signals.md quotes the counts this test pins.
func TestAgreementOnLogs(t *testing.T) {
	files, err := filepath.Glob("../phases/testdata/*.log")
	if err != nil || len(files) == 0 {
		t.Fatalf("no logs: %v", err)
	}
	type start struct {
		name string
		in   Inputs
	}
	var starts []start
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		r, err := phases.Parse(fh, phases.Options{Source: f})
		fh.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		in, ok := FromLog(r.VLLMVersion, r.Args, "", "", "", r.CompileCacheHash)
		if !ok || in.CacheHash == "" || in.VLLMVersion == "" {
			continue
		}
		starts = append(starts, start{filepath.Base(f), in})
	}
	var pairs, miss, missAgree, unknown, unknownSameHash, sameModel, sameModelAgree int
	for i, a := range starts {
		for j, b := range starts {
			if i == j {
				continue
			}
			pairs++
			v := Compare(b.in, []Inputs{a.in})
			sameHash := a.in.CacheHash == b.in.CacheHash
			if v.Outcome == Hit {
				t.Fatalf("%s vs %s: hit predicted although the GPU, image and env are unknown", b.name, a.name)
			}
			if a.in.Model == b.in.Model {
				sameModel++
				if v.Outcome == Miss && !sameHash {
					sameModelAgree++ // a miss predicted and the hash differs
				}
			}
			switch v.Outcome {
			case Miss:
				miss++
				if !sameHash {
					missAgree++
				} else {
					t.Errorf("%s vs %s: miss predicted (%v) but the hash is the same", b.name, a.name, v.Differs)
				}
			case Unknown:
				unknown++
				if sameHash {
					unknownSameHash++
				}
			}
		}
	}
	t.Logf("%d starts, %d ordered pairs: %d predicted miss, %d of them with a different hash; %d unknown (%d with the same hash); same model: %d pairs, %d predicted miss with a different hash",
		len(starts), pairs, miss, missAgree, unknown, unknownSameHash, sameModel, sameModelAgree)
	// The figures docs/signals.md quotes: change both together.
	if len(starts) != 14 || pairs != 182 || miss != 180 || missAgree != 180 || unknown != 2 || unknownSameHash != 2 ||
		sameModel != 4 || sameModelAgree != 2 {
		t.Errorf("agreement figures changed: update docs/signals.md")
	}
}
