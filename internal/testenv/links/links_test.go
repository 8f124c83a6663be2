package links_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/internal/testenv/links"
)

// TestLinksCapEachMember: a server inside member A (listening from the test process) sends 12 MiB to
// curl inside member B over 4 MiB/s links: it takes about 3 s (the cap holds, within 10 % above and
// 30 % below), the server is not reachable from the host's own network, and a Forward relay in a
// member reaches a loopback-only service of the host.
func TestLinksCapEachMember(t *testing.T) {
	if why := links.Available(); why != "" {
		testenv.Unavailable(t, why+" (run make test as root)")
	}
	const rate, size = 4 << 20, 12 << 20
	lab := links.New(t)
	a, b := lab.Add("a", 10, rate), lab.Add("b", 11, rate)
	ln, err := a.Listen(a.IP + ":0")
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), size)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) })}
	go srv.Serve(ln)
	defer srv.Close()

	start := time.Now()
	out, err := b.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{size_download}", "http://"+ln.Addr().String()+"/").CombinedOutput()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("curl from b: %v: %s", err, out)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(string(out))); n != size {
		t.Fatalf("b read %s bytes, want %d", out, size)
	}
	got := float64(size) / took.Seconds()
	t.Logf("12 MiB from a to b in %s: %.2f MiB/s over %.0f MiB/s links", took.Round(time.Millisecond), got/(1<<20), float64(rate)/(1<<20))
	if got > 1.1*rate || got < 0.7*rate {
		t.Errorf("b read at %.2f MiB/s; the links cap it at %.0f MiB/s", got/(1<<20), float64(rate)/(1<<20))
	}

	// The member's address is not the host's: a dial from the host's namespace does not reach it.
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), 500*time.Millisecond); err == nil {
		c.Close()
		t.Errorf("the host reached %s, which only the lab's namespaces should", ln.Addr())
	}

	// A relay in b to a loopback-only service of the host.
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hostSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host loopback") })}
	go hostSrv.Serve(host)
	defer hostSrv.Close()
	relay, err := b.Listen(b.IP + ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	go links.Forward(relay, host.Addr().String())
	out, err = a.Command("curl", "-sS", "--max-time", "5", fmt.Sprintf("http://%s/", relay.Addr())).CombinedOutput()
	if err != nil || string(out) != "host loopback" {
		t.Errorf("a through b's relay: %q, %v", out, err)
	}
	if _, err := os.Stat("/run/netns/" + a.NS); err != nil {
		t.Errorf("member a's namespace is gone before the test ends: %v", err)
	}
}
