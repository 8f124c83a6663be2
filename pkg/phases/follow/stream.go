package follow

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"warmd.io/warmd/pkg/phases"
)

// maxPending bounds an unterminated line kept between reads.
const maxPending = 1 << 20

// stream is one container start: the kubelet's <container>/<N>.log and the files it rotated into.
type stream struct {
	pod     podRef
	restart int
	path    string // .../<N>.log
	f       *os.File
	ino     uint64
	pending []byte
	parser  *phases.Parser
	// terminalAt is when (our clock) the parser first reported ready or failed; the record waits a
	// settle time for the rest (first /health 200, the whole traceback).
	terminalAt time.Time
	done       bool // recorded, or not vLLM
}

func (s *stream) key() string {
	return phases.StartKey(s.pod.namespace, s.pod.name, s.pod.uid, s.pod.container, s.restart)
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// rotated lists the files kubelet rotated <N>.log into (<N>.log.<timestamp>[.gz]), oldest first.
func rotated(path string) []string {
	matches, _ := filepath.Glob(path + ".*")
	var out []string
	for _, m := range matches {
		if !strings.HasSuffix(m, ".tmp") {
			out = append(out, m)
		}
	}
	sort.Strings(out) // the suffix is YYYYMMDD-hhmmss: lexical order is time order
	return out
}

// open starts reading a start found for the first time: its rotated files whole, then <N>.log.
func (s *stream) open() error {
	for _, r := range rotated(s.path) {
		if err := s.readWhole(r); err != nil {
			return err
		}
	}
	return s.reopen()
}

func (s *stream) readWhole(path string) error {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // rotated away meanwhile
		}
		return fmt.Errorf("open rotated log %s: %w", path, err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("read rotated log %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	if err := s.consume(r); err != nil {
		return fmt.Errorf("read rotated log %s: %w", path, err)
	}
	return nil
}

// reopen switches to the file now at s.path (after a rotation, or the first time).
func (s *stream) reopen() error {
	f, err := os.Open(s.path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // between rotation and the runtime creating the new file
		}
		return fmt.Errorf("open container log %s: %w", s.path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("stat container log %s: %w", s.path, err)
	}
	if s.f != nil {
		s.f.Close()
	}
	s.f, s.ino = f, inode(fi)
	return nil
}

// poll reads what was appended, following a rotation: the old file is drained through the descriptor
// we hold (a rename does not affect it) before the new <N>.log is opened.
func (s *stream) poll() error {
	if s.done {
		return nil
	}
	if s.f == nil {
		if err := s.reopen(); err != nil || s.f == nil {
			return err
		}
	}
	if err := s.consume(s.f); err != nil {
		return fmt.Errorf("read container log %s: %w", s.path, err)
	}
	fi, err := os.Stat(s.path)
	if err != nil || inode(fi) == s.ino {
		return nil // same file, or the new one does not exist yet
	}
	if err := s.consume(s.f); err != nil { // the last writes before the runtime reopened
		return fmt.Errorf("read container log %s: %w", s.path, err)
	}
	if err := s.reopen(); err != nil {
		return err
	}
	return s.consume(s.f)
}

// consume feeds complete lines to the parser and keeps an unterminated tail for the next read.
func (s *stream) consume(r io.Reader) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			s.pending = append(s.pending, buf[:n]...)
			for {
				i := bytes.IndexByte(s.pending, '\n')
				if i < 0 {
					break
				}
				s.parser.Line(string(s.pending[:i]))
				s.pending = s.pending[i+1:]
			}
			if len(s.pending) > maxPending {
				s.parser.Line(string(s.pending))
				s.pending = nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// close releases the file; an unterminated last line is fed as it is.
func (s *stream) close() {
	if len(s.pending) > 0 {
		s.parser.Line(string(s.pending))
		s.pending = nil
	}
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}
