package security

// Class 10, the serving side: what a downloader can make warmd's peer server spend. The probe got 9×
// a file's size back for 4,000 one-byte ranges, and a downloader that stopped reading held its
// serving slot for as long as it kept the connection open.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/peer/serve"
	"warmd.io/warmd/pkg/prefetch"
)

// TestPeerServerBoundsHostileDownloaders: `warmd run` with peers on (one serving slot, stallTimeout
// 8s) on a real API server serves a published 32 MiB model file. Against it: requests without a
// token or with a token for another audience are refused by the real TokenReview; 4,000 one-byte
// ranges get 416 with a small body; 64 adjacent one-byte ranges are coalesced into one 64-byte
// answer; downloaders that ask for the whole file and never read, as many as the server admits, hold
// their slots only until a piece has stalled 8 s: their connections are cut and the next downloader
// is served. The model stays ready, warmd's
// peak RSS is bounded, the canary untouched.
func TestPeerServerBoundsHostileDownloaders(t *testing.T) {
	kenv := kubeenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, b := NewWorld(t), StubBucket(t)
	w.Env = append(w.Env, b.Env...)
	m, err := fixtures.NewModel(fixtures.ModelSpec{Shards: 1, TensorsA: 2, BytesPerTensor: 16 << 20, Seed: 7})
	must(t, err)
	b.PutModel("m/", m.Files)
	big, size := "", 0
	for name, data := range m.Files {
		if len(data) > size {
			big, size = name, len(data)
		}
	}

	const name, nodeName = "sec/served", "sec-server"
	self, port := peertest.IP(3), peertest.FreePort(t)
	createNode(ctx, t, kenv, nodeName, self, nil)
	tokenFile := filepath.Join(w.Work, "token")
	must(t, os.WriteFile(tokenFile, []byte(kenv.Token(t, "warmd", "warmd", config.DefaultPeerAudience)+"\n"), 0o600))
	cfg := w.Config(map[string]string{
		"nodeName":  nodeName,
		"s3":        b.S3Section(),
		"models":    ModelsSection(map[string]string{"name": name, "source": b.URL("m/")}),
		"readiness": fmt.Sprintf("{kubeconfig: %s, resync: 10s}", quoteYAML(kenv.Kubeconfig(t, "warmd-"+nodeName, w.Work))),
		"peers": fmt.Sprintf("{enabled: true, listen: '%s:%s', tokenFile: %s, seedWait: 5s, serveSlots: 1, stallTimeout: 8s}",
			self, port, quoteYAML(tokenFile)),
		"prewarm": "{disabled: true}",
	})
	d := w.StartDaemon(cfg)
	defer d.Stop()
	if st := d.WaitModels(2*time.Minute, name)[name]; st.State != prefetch.StateReady {
		t.Fatalf("%s: %s (%s)\n%s", name, st.State, st.Reason, tail(d.Log(), 3000))
	}
	url := peer.WeightsURL("http://"+net.JoinHostPort(self, port), name, "main", big)
	token, _ := os.ReadFile(tokenFile)
	// get asks for the big file as downloader from (the X-Warmd-Node hint slots are kept by).
	get := func(bearer, ranges, from string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(bearer))
		}
		req.Header.Set(peer.HeaderNode, from)
		if ranges != "" {
			req.Header.Set("Range", ranges)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", big, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, int64(size)+1<<20))
		return resp.StatusCode, body
	}

	if code, _ := get(string(token), "bytes=0-1023", "probe"); code != http.StatusPartialContent {
		t.Fatalf("a downloader with warmd's token: %d, want 206 (the case would test nothing)", code)
	}
	if code, _ := get("", "bytes=0-1023", "probe"); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	other := kenv.Token(t, "warmd", "warmd", "another-audience")
	if code, _ := get(other, "bytes=0-1023", "probe"); code != http.StatusUnauthorized {
		t.Errorf("a token for another audience: %d, want 401", code)
	}
	var many, adjacent []string
	for i := range 4000 {
		many = append(many, fmt.Sprintf("%d-%d", i*7, i*7))
	}
	for i := range 64 {
		adjacent = append(adjacent, fmt.Sprintf("%d-%d", i, i))
	}
	if code, body := get(string(token), "bytes="+strings.Join(many, ","), "probe"); code != http.StatusRequestedRangeNotSatisfiable || len(body) > 4<<10 {
		t.Errorf("4,000 one-byte ranges: %d with %d bytes, want 416 with a small body", code, len(body))
	}
	if code, body := get(string(token), "bytes="+strings.Join(adjacent, ","), "probe"); code != http.StatusPartialContent || len(body) != 64 {
		t.Errorf("64 adjacent one-byte ranges: %d with %d bytes, want 206 with the 64 bytes coalesced", code, len(body))
	}

	// Slow downloaders: each asks for the whole file with a small receive buffer and never reads.
	// The one slot goes to the first once the probe's has been idle for serve.DefaultSlotIdle; since
	// they leave the upload cap idle, the server admits one more per second up to 4× the slots
	// (overflow). Open them until one is refused: then every slot the server has is held by a slow
	// downloader, and only the stall deadline can free one.
	time.Sleep(serve.DefaultSlotIdle + 500*time.Millisecond)
	path := strings.TrimPrefix(url, "http://"+net.JoinHostPort(self, port))
	var slow []net.Conn
	defer func() {
		for _, c := range slow {
			c.Close()
		}
	}()
	lastOpen := time.Now()
	for i := range 8 {
		c, err := net.Dial("tcp", net.JoinHostPort(self, port))
		must(t, err)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetReadBuffer(4 << 10)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n%s: slow-%d\r\n\r\n",
			path, strings.TrimSpace(string(token)), peer.HeaderNode, i)
		status, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("slow downloader %d: %v", i, err)
		}
		if !strings.Contains(status, "200") {
			c.Close()
			break
		}
		if st := tcpState(t, c.RemoteAddr().String(), c.LocalAddr().String()); st != "ESTABLISHED" {
			t.Fatalf("slow downloader %d just admitted: the server's side is %s, want ESTABLISHED (tcpState cannot see it)", i, st)
		}
		slow, lastOpen = append(slow, c), time.Now()
		time.Sleep(1100 * time.Millisecond) // overflow admits one per second
	}
	if len(slow) == 0 || len(slow) == 8 {
		t.Fatalf("%d slow downloaders admitted before one was refused; want 1..4 (one slot, overflow 4×)", len(slow))
	}
	start := time.Now()
	first, _ := get(string(token), "bytes=0-1023", "next")
	if first != http.StatusServiceUnavailable {
		t.Errorf("while %d slow downloaders hold every slot the next got %d, want 503 (the case would test nothing)", len(slow), first)
	}
	var served time.Duration
	for time.Since(start) < 30*time.Second {
		if code, _ := get(string(token), "bytes=0-1023", "next"); code == http.StatusPartialContent {
			served = time.Since(start)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if served == 0 {
		t.Errorf("the slow downloaders kept every slot for 30 s; want each freed after stallTimeout (8 s)")
	}
	// The server must have cut the slow connections: its side of each is no longer ESTABLISHED (it is
	// FIN_WAIT1 behind the unsent bytes, or gone). Reading the client side cannot show it: a sender
	// whose window stayed shut probes it with backoff, so the queued bytes trickle for a long time.
	for i, c := range slow {
		var state string
		err := eventually(10*time.Second, func() bool {
			state = tcpState(t, c.RemoteAddr().String(), c.LocalAddr().String())
			return state != "ESTABLISHED"
		})
		t.Logf("slow downloader %d: the server's side of its connection is %s", i, state)
		if err != nil {
			t.Errorf("slow downloader %d: the server kept its connection open after the stall (%s)", i, state)
		}
	}
	hwm := vmHWM(t, d)
	t.Logf("%d slow downloaders held every slot; the next was served %s after the last of them was admitted; warmd's peak RSS %d MiB",
		len(slow), (start.Sub(lastOpen) + served).Round(100*time.Millisecond), hwm>>20)
	if served > 15*time.Second {
		t.Errorf("the next downloader waited %s, bound 15 s (stallTimeout 8 s)", served)
	}
	if hwm > 256<<20 {
		t.Errorf("warmd's peak RSS %d MiB, bound 256 MiB", hwm>>20)
	}
	if st, _ := d.Weights().Model(name); st.State != prefetch.StateReady {
		t.Errorf("%s is %s after the hostile downloaders, want ready", name, st.State)
	}
	w.Check()
}

// tcpState is the kernel's state of the IPv4 TCP socket local→remote (/proc/net/tcp), "gone" when
// there is none.
func tcpState(t *testing.T, local, remote string) string {
	t.Helper()
	hexAddr := func(a string) string {
		ap, err := netip.ParseAddrPort(a)
		must(t, err)
		b := ap.Addr().As4()
		return fmt.Sprintf("%02X%02X%02X%02X:%04X", b[3], b[2], b[1], b[0], ap.Port())
	}
	l, r := hexAddr(local), hexAddr(remote)
	data, err := os.ReadFile("/proc/net/tcp")
	must(t, err)
	states := map[string]string{"01": "ESTABLISHED", "04": "FIN_WAIT1", "05": "FIN_WAIT2", "06": "TIME_WAIT",
		"07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0B": "CLOSING"}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == l && f[2] == r {
			if s, ok := states[f[3]]; ok {
				return s
			}
			return "state " + f[3]
		}
	}
	return "gone"
}

// eventually polls ok every 100 ms until it holds or timeout passes.
func eventually(timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}
