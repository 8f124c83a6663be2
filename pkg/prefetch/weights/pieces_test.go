package weights_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights"
)

// partedSource makes some files of a file:// source look like multipart uploads with CRC32C part
// checksums, as S3 keeps them (a composite checksum, an ETag with a part count, a part list), and
// can hold back every range from one offset of one file and corrupt one part's bytes the first time
// they are read, as a bad peer would. It says it has holders, as the peer source does, so the engine
// verifies parts as they land.
type partedSource struct {
	prefetch.Source
	parts map[string][]objstore.Part
	body  map[string][]byte

	holdFile string
	holdFrom int64
	open     chan struct{}

	corruptFile string
	corruptAt   int64 // the byte flipped the first time a range holding it is read

	mu    sync.Mutex
	reads int // reads of a range holding corruptAt
}

func (s *partedSource) Holders(string, int64, int64) int { return 0 }

func (s *partedSource) Head(ctx context.Context, name fsroot.Path) (objstore.Object, error) {
	o, err := s.Source.Head(ctx, name)
	parts, ok := s.parts[name.String()]
	if err != nil || !ok {
		return o, err
	}
	var sums [][]byte
	for _, p := range parts {
		b, _ := decode64(p.Checksum)
		sums = append(sums, b)
	}
	v, _ := objstore.CompositeChecksum("CRC32C", sums)
	o.Checksum = objstore.Checksum{Algorithm: "CRC32C", Value: v, Composite: true}
	o.ETag = fmt.Sprintf("0123456789abcdef0123456789abcdef-%d", len(parts))
	return o, nil
}

func (s *partedSource) Parts(_ context.Context, name fsroot.Path) ([]objstore.Part, error) {
	return s.parts[name.String()], nil
}

func (s *partedSource) GetRange(ctx context.Context, name fsroot.Path, off, n int64, w io.Writer) (int64, error) {
	if name.String() == s.holdFile && off+n > s.holdFrom {
		select {
		case <-s.open:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if name.String() == s.corruptFile && off <= s.corruptAt && s.corruptAt < off+n {
		s.mu.Lock()
		s.reads++
		first := s.reads == 1
		s.mu.Unlock()
		if first {
			b := bytes.Clone(s.body[name.String()][off : off+n])
			b[s.corruptAt-off] ^= 0xff
			k, err := w.Write(b)
			return int64(k), err
		}
	}
	return s.Source.GetRange(ctx, name, off, n, w)
}

func (s *partedSource) corruptReads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func decode64(v string) ([]byte, error) { return base64.StdEncoding.DecodeString(v) }

// cutParts splits b into parts of size bytes (the last shorter) with their CRC32C checksums.
func cutParts(b []byte, size int) []objstore.Part {
	var parts []objstore.Part
	for off := 0; off < len(b); off += size {
		end := min(off+size, len(b))
		sum := crc32.Checksum(b[off:end], crc32.MakeTable(crc32.Castagnoli))
		parts = append(parts, objstore.Part{Number: len(parts) + 1, Size: int64(end - off),
			Checksum: objstore.Encode([]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})})
	}
	return parts
}

// A multipart file's parts are verified as they land and listed in the status's Pieces (what the
// peer server serves of a file still downloading) before the file is whole: parts on chunk
// boundaries (their chunk CRCs combined) and parts across them (read back). A part whose bytes do
// not match the origin's part checksum is never listed until it was fetched again and matched; the
// published model is the source's, verified by its composite checksum.
func TestPartsAreServedBeforeTheirFile(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	model := newFakeModel(5, 6<<20+11, 5<<20+333)
	model.writeDir(t, src)
	const aligned, across = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	ps := &partedSource{
		parts: map[string][]objstore.Part{
			aligned: cutParts(model[aligned], 2<<20),   // 1 MiB chunks: parts end on chunk boundaries
			across:  cutParts(model[across], 1536<<10), // 1.5 MiB: every other part ends mid-chunk
		},
		body:        map[string][]byte{aligned: model[aligned], across: model[across]},
		holdFile:    across,
		holdFrom:    3 << 20, // parts 1 and 2 (bytes 0..3 MiB) land; the rest waits
		open:        make(chan struct{}),
		corruptFile: across,
		corruptAt:   1536<<10 + 10, // in part 2, in chunk 1 (bytes 1-2 MiB), which part 1 shares
	}
	data := t.TempDir()
	e := newEngine(t, data, func(o *weights.Options) {
		inner := weights.SourceOpener(nil)
		o.Open = func(ctx context.Context, m config.Model) (prefetch.Source, error) {
			s, err := inner(ctx, m)
			ps.Source = s
			return ps, err
		}
		o.ProgressInterval = 5 * time.Millisecond
	})
	var (
		mu       sync.Mutex
		early    []byte // part 2's bytes read from staging when Pieces first named it
		listed   bool
		tooEarly string
		counted  *prefetch.Servable // Servable when parts 1-2 were first listed
	)
	want := [][2]int64{{0, 3 << 20}}
	reached := make(chan struct{})
	var once sync.Once
	progress := func(s prefetch.ModelStatus) {
		mu.Lock()
		defer mu.Unlock()
		pc, ok := s.Pieces[across]
		if !ok {
			return
		}
		for _, sp := range pc.Spans {
			if sp[1] > ps.corruptAt && ps.corruptReads() < 2 && tooEarly == "" {
				tooEarly = fmt.Sprintf("span %v listed after %d read(s) of the corrupted range", sp, ps.corruptReads())
			}
		}
		if !listed && len(pc.Spans) == 1 && pc.Spans[0] == want[0] {
			listed = true
			counted = s.Servable
			b, err := os.ReadFile(filepath.Join(data, "weights", pc.Path))
			if err == nil && len(b) == len(model[across]) {
				early = b[:3<<20]
			}
			once.Do(func() { close(reached) })
		}
	}
	var (
		st  prefetch.ModelStatus
		err error
	)
	fetched := make(chan struct{})
	go func() {
		defer close(fetched)
		st, err = e.Fetch(context.Background(), fileModel("acme/parts", src), progress)
	}()
	select {
	case <-reached:
	case <-fetched:
		t.Fatalf("the fetch ended (%v) before parts 1-2 of %s were listed", err, across)
	case <-time.After(30 * time.Second):
		t.Fatalf("parts 1-2 of %s were never listed as verified while its rest was held back", across)
	}
	mu.Lock()
	if !bytes.Equal(early, model[across][:3<<20]) {
		t.Errorf("staging held %d bytes that differ from the source's at the time parts 1-2 were listed", len(early))
	}
	mu.Unlock()
	close(ps.open)
	<-fetched
	mu.Lock()
	defer mu.Unlock()
	if tooEarly != "" {
		t.Errorf("a corrupted part was listed before it was fetched again: %s", tooEarly)
	}
	if ps.corruptReads() < 2 {
		t.Errorf("the corrupted range was read %d time(s); its part must be fetched again once it mismatches", ps.corruptReads())
	}
	if counted == nil || counted.PartFiles < 1 || counted.PartBytes < want[0][1] {
		t.Errorf("Servable %+v when parts 1-2 of %s were listed: want their %d bytes counted", counted, across, want[0][1])
	}
	if err != nil || st.State != prefetch.StateReady || st.Pieces != nil || st.Servable != nil {
		t.Fatalf("after the held parts: %s, pieces %v, servable %+v, %v", st.State, st.Pieces, st.Servable, err)
	}
	checkSnapshot(t, st.SnapshotPath, model)
	for _, fv := range st.Files {
		if (fv.Name == aligned || fv.Name == across) && fv.Method != prefetch.VerifiedComposite {
			t.Errorf("%s verified by %s, want %s", fv.Name, fv.Method, prefetch.VerifiedComposite)
		}
	}
}
