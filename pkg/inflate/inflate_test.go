package inflate_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"

	"warmd.io/warmd/pkg/inflate"
)

// collect inflates z serially and returns the output.
func collect(t testing.TB, z []byte, o inflate.Options) ([]byte, inflate.Result, error) {
	t.Helper()
	var out bytes.Buffer
	res, err := inflate.Decode(context.Background(), bytes.NewReader(z), func(c *inflate.Chunk) error {
		out.Write(c.Data)
		c.Release()
		return nil
	}, o)
	return out.Bytes(), res, err
}

func collectIndexed(t testing.TB, z []byte, idx *inflate.Index, workers int) ([]byte, error) {
	t.Helper()
	var out bytes.Buffer
	_, err := inflate.DecodeIndexed(context.Background(), bytes.NewReader(z), idx, func(c *inflate.Chunk) error {
		out.Write(c.Data)
		c.Release()
		return nil
	}, inflate.Options{Workers: workers})
	return out.Bytes(), err
}

// corpus is data of the kinds layers carry: program text (ELF binaries and libraries from this
// machine), source text, runs of zeros, and incompressible bytes.
func corpus(t testing.TB) map[string][]byte {
	t.Helper()
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 1<<20)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	var text strings.Builder
	words := strings.Fields("the quick brown fox jumps over lazy dog vllm cuda kernel tensor weight shard layer")
	for text.Len() < 1<<20 {
		text.WriteString(words[rnd.IntN(len(words))])
		text.WriteByte(" \n"[rnd.IntN(8)/7])
	}
	var elf []byte
	for _, glob := range []string{"/usr/bin/*", "/usr/lib/x86_64-linux-gnu/*.so*", "/usr/lib/aarch64-linux-gnu/*.so*"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			if len(elf) > 2<<20 {
				break
			}
			if b, err := os.ReadFile(f); err == nil {
				elf = append(elf, b...)
			}
		}
	}
	elf = elf[:min(len(elf), 2<<20)]
	mixed := append(append(append([]byte{}, elf[:min(len(elf), 1<<20)]...), make([]byte, 300<<10)...), random[:200<<10]...)
	return map[string][]byte{
		"empty": {}, "byte": {'x'}, "hello": []byte("hello, hello, hello world\n"),
		"random": random, "text": []byte(text.String()), "zeros": make([]byte, 2<<20),
		"elf": elf, "mixed": mixed,
	}
}

func gz(t testing.TB, data []byte, level int, klauspost bool) []byte {
	t.Helper()
	var b bytes.Buffer
	if klauspost {
		w, err := kgzip.NewWriterLevel(&b, level)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		w.Close()
		return b.Bytes()
	}
	w, err := gzip.NewWriterLevel(&b, level)
	if err != nil {
		t.Fatal(err)
	}
	w.Name, w.Comment, w.Extra = "layer.tar", "a comment", []byte("xx")
	w.Write(data)
	w.Close()
	return b.Bytes()
}

func TestDecodeMatchesStdlib(t *testing.T) {
	for name, data := range corpus(t) {
		for _, level := range []int{gzip.NoCompression, gzip.BestSpeed, 6, gzip.BestCompression, gzip.HuffmanOnly} {
			for _, kp := range []bool{false, true} {
				z := gz(t, data, level, kp)
				// The input size as a caller knows it: unknown, exact, or wrong (too small: the
				// input buffer is then compacted more often, which must not change a byte).
				for _, size := range []int64{0, int64(len(z)), int64(len(z))/3 + 1} {
					got, res, err := collect(t, z, inflate.Options{InputSize: size})
					if err != nil {
						t.Fatalf("%s level %d klauspost %v input size %d: %v", name, level, kp, size, err)
					}
					if !bytes.Equal(got, data) {
						t.Fatalf("%s level %d klauspost %v input size %d: output differs (%d bytes, want %d)", name, level, kp, size, len(got), len(data))
					}
					if res.In != int64(len(z)) || res.Out != int64(len(data)) || res.Members != 1 {
						t.Fatalf("%s: result %+v, want in %d out %d, 1 member", name, res, len(z), len(data))
					}
				}
			}
		}
	}
}

func TestMultiMember(t *testing.T) {
	c := corpus(t)
	var z, want []byte
	for _, name := range []string{"text", "empty", "elf", "zeros", "hello"} {
		z = append(z, gz(t, c[name], 6, name == "elf")...)
		want = append(want, c[name]...)
	}
	got, res, err := collect(t, z, inflate.Options{Span: 256 << 10})
	if err != nil || !bytes.Equal(got, want) || res.Members != 5 {
		t.Fatalf("multi-member: err %v, equal %v, members %d", err, bytes.Equal(got, want), res.Members)
	}
	for _, w := range []int{1, 2, 4} {
		got, err := collectIndexed(t, z, res.Index, w)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("indexed multi-member, %d workers: err %v, equal %v", w, err, bytes.Equal(got, want))
		}
	}
	// Junk after the last member is refused, as Go's gzip reader refuses it.
	if _, _, err := collect(t, append(z, 0, 0, 0), inflate.Options{}); !errors.Is(err, inflate.ErrHeader) && !errors.Is(err, inflate.ErrTruncated) {
		t.Fatalf("trailing junk: %v", err)
	}
}

func TestIndexedMatchesSerial(t *testing.T) {
	for name, data := range corpus(t) {
		for _, level := range []int{1, 6} {
			z := gz(t, data, level, level == 1)
			// Level 1 as a layer is unpacked (its size known, so small chunks for a small
			// stream), level 6 without the size.
			var size int64
			if level == 1 {
				size = int64(len(z))
			}
			_, res, err := collect(t, z, inflate.Options{Span: 128 << 10, InputSize: size})
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > 1<<20 && name != "zeros" && len(res.Index.Points) < 4 {
				t.Fatalf("%s: only %d points for %d bytes", name, len(res.Index.Points), len(data))
			}
			p, err := res.Index.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			idx, err := inflate.UnmarshalIndex(p, int64(len(z)))
			if err != nil {
				t.Fatalf("%s: round trip: %v", name, err)
			}
			for _, w := range []int{1, 3, runtime.GOMAXPROCS(0)} {
				got, err := collectIndexed(t, z, idx, w)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%s level %d, %d workers: err %v, equal %v", name, level, w, err, bytes.Equal(got, data))
				}
			}
		}
	}
}

func TestHostileStreams(t *testing.T) {
	data := corpus(t)["elf"]
	z := gz(t, data, 6, false)
	// Every cut of the stream fails; none yields a short output as if whole.
	for _, cut := range []int{0, 1, 10, 11, 100, len(z) / 2, len(z) - 9, len(z) - 8, len(z) - 1} {
		if _, _, err := collect(t, z[:cut], inflate.Options{}); err == nil {
			t.Fatalf("stream cut at %d of %d decoded without error", cut, len(z))
		}
	}
	// A flipped bit anywhere fails: as corrupt data, or by the member's CRC-32.
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 40 {
		bad := bytes.Clone(z)
		i := 10 + rnd.IntN(len(z)-18)
		bad[i] ^= 1 << rnd.IntN(8)
		if got, _, err := collect(t, bad, inflate.Options{}); err == nil && !bytes.Equal(got, data) {
			t.Fatalf("flipped byte %d: wrong output without an error", i)
		}
	}
	// A bomb stops at the limit.
	bomb := gz(t, make([]byte, 64<<20), 9, false)
	if _, _, err := collect(t, bomb, inflate.Options{MaxOutput: 8 << 20}); !errors.Is(err, inflate.ErrTooLarge) {
		t.Fatalf("bomb: %v, want ErrTooLarge", err)
	}
	if _, _, err := collect(t, []byte("PK\x03\x04 not gzip at all"), inflate.Options{}); !errors.Is(err, inflate.ErrHeader) {
		t.Fatalf("not gzip: %v", err)
	}
}

func TestHostileIndex(t *testing.T) {
	data := corpus(t)["text"]
	z := gz(t, data, 6, false)
	_, res, err := collect(t, z, inflate.Options{Span: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	clone := func() *inflate.Index {
		x := *res.Index
		x.Points = append([]inflate.Point(nil), x.Points...)
		return &x
	}
	// A point moved off its block start fails with ErrIndex or as corrupt data, never silently.
	for _, delta := range []int64{1, -1, 8, 1000} {
		x := clone()
		x.Points[2].In += delta
		got, err := collectIndexed(t, z, x, 2)
		if err == nil && bytes.Equal(got, data) {
			continue // a shift onto another valid decode of the same bytes cannot happen, but equal is fine
		}
		if err == nil {
			t.Fatalf("point moved by %d bits: wrong output without an error", delta)
		}
	}
	x := clone()
	x.Points[3].Out += 5
	if _, err := collectIndexed(t, z, x, 2); err == nil {
		t.Fatal("point with a wrong output offset decoded without error")
	}
	// A wrong window gives wrong bytes: only the caller's digest can tell, and it must differ.
	x = clone()
	w := bytes.Clone(x.Points[1].Window)
	for i := range w {
		w[i] ^= 0x55
	}
	x.Points[1].Window = w
	if got, err := collectIndexed(t, z, x, 2); err == nil && bytes.Equal(got, data) {
		t.Fatal("a wrong window changed nothing: the test does not exercise it")
	}
	// Malformed encodings are refused before any decode.
	good, _ := res.Index.MarshalBinary()
	for name, p := range map[string][]byte{"empty": nil, "junk": []byte("garbage"), "cut": good[:len(good)/2]} {
		if _, err := inflate.UnmarshalIndex(p, int64(len(z))); err == nil {
			t.Fatalf("%s index accepted", name)
		}
	}
	if _, err := inflate.UnmarshalIndex(good, int64(len(z))+1); !errors.Is(err, inflate.ErrBadIndex) {
		t.Fatalf("index for another size: %v", err)
	}
	huge := &inflate.Index{CompressedSize: int64(len(z)), Size: res.Index.Size}
	for i := range 2000 {
		huge.Points = append(huge.Points, inflate.Point{In: int64(i + 1), Out: int64(i + 1), Window: make([]byte, 40000)})
	}
	p, _ := huge.MarshalBinary()
	if _, err := inflate.UnmarshalIndex(p, int64(len(z))); !errors.Is(err, inflate.ErrBadIndex) {
		t.Fatalf("index with oversized windows: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(gz(f, []byte("hello hello hello"), 6, false))
	f.Add(gz(f, make([]byte, 1000), 9, true))
	f.Add(gz(f, []byte("abc"), 0, false))
	f.Fuzz(func(t *testing.T, z []byte) {
		want, werr := io.ReadAll(mustReader(z))
		got, _, err := collect(t, z, inflate.Options{MaxOutput: 64 << 20})
		if werr == nil && err != nil && len(want) < 64<<20 {
			t.Fatalf("Go decodes it, inflate does not: %v", err)
		}
		if werr == nil && err == nil && !bytes.Equal(got, want) {
			t.Fatal("outputs differ")
		}
	})
}

// mustReader is a Go gzip reader over z that fails on read when the header is bad.
func mustReader(z []byte) io.Reader {
	r, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return errReader{err}
	}
	return r
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// TestIndexedSlowConsumer: a consumer slower than the decoders must not let any worker run ahead
// and take the buffers the span being emitted needs (a deadlock the bench found: spans of 16 chunks,
// a pool sized for one span per worker, and a worker two spans ahead).
func TestIndexedSlowConsumer(t *testing.T) {
	unit := corpus(t)["mixed"]
	var data []byte
	for len(data) < 64<<20 {
		data = append(data, unit...)
	}
	z := gz(t, data, 1, true)
	_, res, err := collect(t, z, inflate.Options{Span: 12 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Index.Points) < 4 {
		t.Fatalf("only %d points", len(res.Index.Points))
	}
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := inflate.DecodeIndexed(context.Background(), bytes.NewReader(z), res.Index, func(c *inflate.Chunk) error {
			out.Write(c.Data)
			c.Release()
			time.Sleep(15 * time.Millisecond)
			return nil
		}, inflate.Options{Workers: 2})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil || !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("err %v, equal %v", err, bytes.Equal(out.Bytes(), data))
		}
	case <-time.After(time.Minute):
		t.Fatal("the indexed decode hung")
	}
}
