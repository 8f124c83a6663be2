package objstore_test

import (
	"bytes"
	"encoding/binary"
	"hash"
	"hash/crc64"
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

// TestCRC64NVMEMatchesReference checks the accelerated CRC64NVME against the plain table algorithm
// (hash/crc64 with the NVMe polynomial) and the check value of the CRC catalogue, at every length
// around the vector widths and at odd offsets, so a fast path cannot silently sum differently.
func TestCRC64NVMEMatchesReference(t *testing.T) {
	ref := crc64.MakeTable(0x9a6c9329ac4bc9b5)
	h, err := objstore.NewHash("CRC64NVME")
	if err != nil {
		t.Fatal(err)
	}
	h.Write([]byte("123456789"))
	if got, want := binary.BigEndian.Uint64(h.Sum(nil)), uint64(0xae8b14860a799888); got != want {
		t.Fatalf("CRC64NVME(\"123456789\") = %#x, want the catalogue's check value %#x", got, want)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	data := make([]byte, 70000)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, off := range []int{0, 1, 7, 13} {
		for n := 0; off+n <= len(data); n += 1 + n/3 {
			h.Reset()
			// Two writes, so state carried between calls is checked too.
			h.Write(data[off : off+n/2])
			h.Write(data[off+n/2 : off+n])
			if got, want := binary.BigEndian.Uint64(h.Sum(nil)), crc64.Checksum(data[off:off+n], ref); got != want {
				t.Fatalf("offset %d length %d: %#x, want %#x", off, n, got, want)
			}
		}
	}
}

// BenchmarkCRC64NVME reports the checksum rate one core gives a streamed download (-bench CRC64).
func BenchmarkCRC64NVME(b *testing.B) {
	buf := make([]byte, 1<<20)
	for _, impl := range []struct {
		name string
		h    func() hash.Hash
	}{
		{"warmd", func() hash.Hash { h, _ := objstore.NewHash("CRC64NVME"); return h }},
		{"hash-crc64-table", func() hash.Hash { return crc64.New(crc64.MakeTable(0x9a6c9329ac4bc9b5)) }},
	} {
		b.Run(impl.name, func(b *testing.B) {
			h := impl.h()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				h.Write(buf)
			}
		})
	}
}
