package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestContextReaderPassesDataThrough(t *testing.T) {
	want := strings.Repeat("vLLM log line\n", 20000)
	for name, r := range map[string]io.Reader{
		"plain":    strings.NewReader(want),
		"one byte": iotest.OneByteReader(strings.NewReader(want)),
		"half":     iotest.HalfReader(strings.NewReader(want)),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := io.ReadAll(ContextReader(context.Background(), r))
			if err != nil || string(got) != want {
				t.Fatalf("read %d bytes, %v; want %d bytes", len(got), err, len(want))
			}
		})
	}
	// A reader that returns data together with its error.
	if err := iotest.TestReader(ContextReader(context.Background(), iotest.DataErrReader(strings.NewReader(want))), []byte(want)); err != nil {
		t.Fatal(err)
	}
}

// TestContextReaderUnblocks: a Read blocked on a pipe whose writer never writes returns once ctx
// ends; the data read before is intact.
func TestContextReaderUnblocks(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	r := ContextReader(ctx, pr)
	pw.WriteString("first\n")
	buf := make([]byte, 64)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "first\n" {
		t.Fatalf("first read %q, %v", buf[:n], err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.Read(buf); done <- err }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("blocked read returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read stayed blocked after ctx ended")
	}
	if _, err := r.Read(buf); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v", err)
	}
	// The abandoned read wrote into the reader's own buffer, not the caller's.
	pw.WriteString("late")
	time.Sleep(20 * time.Millisecond)
	if bytes.Contains(buf, []byte("late")) {
		t.Fatal("a read abandoned at cancel wrote into the caller's buffer")
	}
}
