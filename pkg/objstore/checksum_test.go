package objstore_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"warmd.io/warmd/pkg/objstore"
)

func TestCombineCRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 1<<20+333)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	sum := func(alg string, b []byte) []byte {
		h, err := objstore.NewHash(alg)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
		return h.Sum(nil)
	}
	for _, alg := range []string{"CRC32", "CRC32C", "CRC64NVME"} {
		for _, cuts := range [][]int{{0}, {1}, {4096, 65536}, {1 << 20}, {17, 18, 500000}} {
			t.Run(alg, func(t *testing.T) {
				var acc []byte
				prev := 0
				for _, c := range append(cuts, len(data)) {
					part := sum(alg, data[prev:c])
					if acc == nil {
						acc = part
					} else {
						var err error
						if acc, err = objstore.CombineCRC(alg, acc, part, int64(c-prev)); err != nil {
							t.Fatal(err)
						}
					}
					prev = c
				}
				if want := sum(alg, data); !bytes.Equal(acc, want) {
					t.Errorf("cuts %v: combined %x, want %x", cuts, acc, want)
				}
			})
		}
	}
	if objstore.Combinable("SHA256") {
		t.Error("SHA256 cannot combine")
	}
}
