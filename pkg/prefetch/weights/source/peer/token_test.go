package peer_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	peersrc "warmd.io/warmd/pkg/prefetch/weights/source/peer"
)

// The token is re-read once MaxAge passed, so the kubelet's rotation reaches the peers.
func TestTokenFileRotation(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tf := &peersrc.TokenFile{Path: p, MaxAge: 50 * time.Millisecond}
	if tok, err := tf.Token(); err != nil || tok != "first" {
		t.Fatalf("token %q, %v", tok, err)
	}
	if err := os.WriteFile(p, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, _ := tf.Token(); tok != "first" {
		t.Fatalf("re-read before MaxAge: %q", tok)
	}
	time.Sleep(60 * time.Millisecond)
	if tok, _ := tf.Token(); tok != "second" {
		t.Fatalf("rotated token not read: %q", tok)
	}
	if _, err := (&peersrc.TokenFile{Path: filepath.Join(t.TempDir(), "missing")}).Token(); err == nil {
		t.Fatal("a missing token file gave a token")
	}
}
