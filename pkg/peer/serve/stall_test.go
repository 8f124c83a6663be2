package serve_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/serve"
)

// TestAClientThatStopsReadingLosesItsSlot: a downloader that asks for a 64 MiB layer and reads
// nothing holds the one serving slot only until its next piece has waited WriteStall: then its
// connection is closed and the next downloader is served. Without the write deadline the slot was
// held for as long as the client kept the connection open.
func TestAClientThatStopsReadingLosesItsSlot(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 64<<20)
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(dir, sha), data, 0o444); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(serve.New(serve.Options{Auth: allow{}, ImageLayers: layerDir(dir), ServeSlots: 1,
		SlotIdle: 100 * time.Millisecond, WriteStall: 500 * time.Millisecond}))
	defer srv.Close()
	url := peer.ImageBlobURL(srv.URL, sha)

	// The slow client: a raw connection whose receive buffer fills and is never read.
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n%s: slow\r\n\r\n", strings.TrimPrefix(url, srv.URL), peer.HeaderNode)
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, "200") {
		t.Fatalf("slow client's status line %q, %v", status, err)
	}

	get := func() int {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer ok")
		req.Header.Set(peer.HeaderNode, "other")
		req.Header.Set("Range", "bytes=0-1023")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("while the slow client holds the slot: %d, want 503", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for get() != http.StatusPartialContent {
		if time.Now().After(deadline) {
			t.Fatal("the slow client still holds the slot 10 s on (WriteStall 500 ms)")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
