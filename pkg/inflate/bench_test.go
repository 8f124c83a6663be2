package inflate_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"

	"warmd.io/warmd/pkg/inflate"
)

// BenchmarkDecode inflates the same 16 MiB of layer-like data (ELF, text, zeros, random; gzip -6) with
// warmd's decoder and, for the ratio, with klauspost's and Go's; the MB/s are of output.
func BenchmarkDecode(b *testing.B) {
	c := corpus(b)
	var data []byte
	for len(data) < 16<<20 {
		for _, k := range []string{"elf", "text", "mixed", "elf", "zeros"} {
			data = append(data, c[k]...)
		}
	}
	z := gz(b, data, 6, false)
	b.Run("warmd", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			_, err := inflate.Decode(context.Background(), bytes.NewReader(z), func(c *inflate.Chunk) error {
				c.Release()
				return nil
			}, inflate.Options{})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("klauspost", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			r, err := kgzip.NewReader(bytes.NewReader(z))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stdlib", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			r, err := gzip.NewReader(bytes.NewReader(z))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
