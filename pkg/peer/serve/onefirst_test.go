package serve_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/serve"
)

// TestSpreadOneFirstCopyPerDownloader: a downloader that receives a file's first copy is refused
// the first copy of another while a downloader that receives nothing asked; that one gets it, and
// once every asker receives something, the first one gets a second first copy.
func TestSpreadOneFirstCopyPerDownloader(t *testing.T) {
	srv, _ := stagedHandler(t, serve.Options{ServeSlots: 8})
	want := func(node, file string, status int, why string) {
		t.Helper()
		resp := getAs(t, srv, node, "r2", file)
		if resp.StatusCode != status {
			t.Errorf("%s, %s (%s): %s, want %d", node, file, why, resp.Status, status)
		}
		if status == http.StatusServiceUnavailable && resp.Header.Get(peer.HeaderBusyFile) != "1" {
			t.Errorf("%s, %s: busy without %s", node, file, peer.HeaderBusyFile)
		}
	}
	want("n1", "a.bin", http.StatusPartialContent, "its first copy")
	want("n2", "a.bin", http.StatusServiceUnavailable, "n1 holds its copy")
	want("n1", "b.bin", http.StatusServiceUnavailable, "n1 receives a first copy while n2 waits")
	want("n2", "b.bin", http.StatusPartialContent, "n2 receives nothing here")
	want("n1", "c.bin", http.StatusPartialContent, "every asker receives a first copy")
}

// TestSpreadFirstCopyTakesNoSlot: the first copy of a file of a download in flight here goes out
// while another downloader holds the one serving slot; a second copy waits for the slot.
func TestSpreadFirstCopyTakesNoSlot(t *testing.T) {
	srv, clock := stagedHandler(t, serve.Options{ServeSlots: 1})
	if resp := getRangeAs(t, srv, "n1", "r2", "a.bin", "bytes=0-9"); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("n1, all of a.bin: %s", resp.Status)
	}
	clock.step(time.Second) // n1's copy is over: a.bin went out whole once
	if resp := getAs(t, srv, "n1", "r2", "a.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("n1, a second copy of a.bin (nothing else asked for): %s", resp.Status)
	}
	if resp := getRangeAs(t, srv, "n2", "r2", "b.bin", "bytes=0-9"); resp.StatusCode != http.StatusPartialContent {
		t.Errorf("n2, b.bin's first copy while n1 holds the slot: %s; want it served", resp.Status)
	}
	clock.step(600 * time.Millisecond) // both copies are over; n1's slot stays its own for its idle time
	if resp := getAs(t, srv, "n3", "r2", "b.bin"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(peer.HeaderBusyFile) == "1" {
		t.Errorf("n3, a second copy of b.bin while n1 holds the slot: %s %v; want 503 busy (the slot, not the file)", resp.Status, resp.Header)
	}
}

// TestSpreadFirstCopyResumes: the rest of a first copy a downloader began goes to it while it
// receives another file's first copy and a downloader that receives nothing waits.
func TestSpreadFirstCopyResumes(t *testing.T) {
	srv, clock := stagedHandler(t, serve.Options{ServeSlots: 8})
	if resp := getAs(t, srv, "n1", "r2", "a.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("n1 begins a.bin: %s", resp.Status)
	}
	clock.step(2100 * time.Millisecond) // n1's hold of a.bin is over; a.bin is still unfinished
	if resp := getAs(t, srv, "n1", "r2", "b.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("n1 begins b.bin: %s", resp.Status)
	}
	if resp := getAs(t, srv, "n2", "r2", "b.bin"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("n2, b.bin while n1 holds it: %s; want 503", resp.Status)
	}
	if resp := getRangeAs(t, srv, "n1", "r2", "a.bin", "bytes=4-9"); resp.StatusCode != http.StatusPartialContent {
		t.Errorf("n1, the rest of its first copy of a.bin while it receives b.bin and n2 waits: %s; want it served", resp.Status)
	}
}

// TestSpreadBegunFirstCopyTakesNoSlot: a published file's first copy, once begun (the seed
// published meanwhile, or its first downloader paused), goes on while another downloader holds
// the one serving slot; a file nobody began waits for the slot.
func TestSpreadBegunFirstCopyTakesNoSlot(t *testing.T) {
	root := cache(t)
	publishBig(t, root)
	h := serve.New(serve.Options{Auth: allow{}, Root: root, ServeSlots: 1,
		Published: func(model, rev string) bool { return model == "org/m" && rev == "r1" }})
	clock := freeze(h)
	srv := httptest.NewServer(h)
	defer srv.Close()
	if resp := getAs(t, srv, "n1", "r1", "sub/w.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("n1 begins sub/w.bin: %s", resp.Status)
	}
	clock.step(2100 * time.Millisecond) // n1's slot and its hold of sub/w.bin are over
	if resp := getRangeAs(t, srv, "n3", "r1", "big.bin", "bytes=0-1048575"); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("n3 takes the slot with all of big.bin: %s", resp.Status)
	}
	if resp := getAs(t, srv, "n2", "r1", "sub/w.bin"); resp.StatusCode != http.StatusPartialContent {
		t.Errorf("n2, sub/w.bin's begun first copy while n3 holds the slot: %s; want it served", resp.Status)
	}
	clock.step(600 * time.Millisecond) // copies over; n3's slot stays its own for its idle time
	if resp := getAs(t, srv, "n2", "r1", "big.bin"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(peer.HeaderBusyFile) == "1" {
		t.Errorf("n2, a second copy of big.bin while n3 holds the slot: %s %v; want 503 busy (the slot)", resp.Status, resp.Header)
	}
}
