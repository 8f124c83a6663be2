package security

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/peertest"
	"warmd.io/warmd/internal/procstat"
	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/peer"
	"warmd.io/warmd/pkg/prefetch"
)

// TestMaliciousWarmPeer: on a real API server, a Node whose labels claim the model warm answers
// every chunk warmd asks for with a hostile body: the right size with one byte flipped, or the
// range gzip-encoded (what a compressing middlebox sends; decoded, it would be unbounded work). warmd
// (`warmd run`, peers on) verifies each file against the origin and refuses encoded answers,
// refetches what the peer gave from the origin, drops the peer and reports it in the model's status
// and its log; the published model is the origin's, byte for byte, the peer is credited with
// nothing, the canary untouched, warmd's own peak RSS and the time bounded.
func TestMaliciousWarmPeer(t *testing.T) {
	kenv := kubeenv.Start(t)
	for i, c := range []struct {
		name   string
		answer func(rw http.ResponseWriter, r *http.Request, body []byte)
		// reason is the drop's reason in status and log; why what the log line's why must say.
		reason, why string
	}{
		{"one byte flipped", flipOneByte, peer.DropCorrupt, "differ from the origin"},
		{"gzip-encoded ranges", gzipRanges, peer.DropError, "Content-Encoding gzip"},
	} {
		t.Run(c.name, func(t *testing.T) { maliciousPeer(t, kenv, i+1, c.answer, c.reason, c.why) })
	}
}

// flipOneByte answers the range asked for from the file with its middle byte flipped.
func flipOneByte(rw http.ResponseWriter, r *http.Request, body []byte) {
	bad := bytes.Clone(body)
	bad[len(bad)/2] ^= 0xff
	rw.Header().Set(peer.HeaderSize, strconv.Itoa(len(body)))
	http.ServeContent(rw, r, "", time.Time{}, bytes.NewReader(bad))
}

// gzipRanges answers the range asked for (one "bytes=a-b") with its true Content-Range and the
// range's bytes gzip-encoded, as a compressing proxy would.
func gzipRanges(rw http.ResponseWriter, r *http.Request, body []byte) {
	var from, to int
	if _, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &from, &to); err != nil || from > to || to >= len(body) {
		http.Error(rw, "one range, please", http.StatusRequestedRangeNotSatisfiable)
		return
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(body[from : to+1])
	zw.Close()
	rw.Header().Set(peer.HeaderSize, strconv.Itoa(len(body)))
	rw.Header().Set("Content-Encoding", "gzip")
	rw.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, len(body)))
	rw.Header().Set("Content-Length", strconv.Itoa(z.Len()))
	rw.WriteHeader(http.StatusPartialContent)
	rw.Write(z.Bytes())
}

// maliciousPeer runs one case of TestMaliciousWarmPeer: Nodes sec-node-<i> (warmd's own) and
// sec-evil-<i> (the peer, at peertest.IP(i)) on the shared API server, model sec/peer-<i>.
func maliciousPeer(t *testing.T, kenv *kubeenv.Env, i int, answer func(http.ResponseWriter, *http.Request, []byte), reason, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, b, files := outsideWorld(t)
	name := fmt.Sprintf("sec/peer-%d", i)
	selfNode, evilNode := fmt.Sprintf("sec-node-%d", i), fmt.Sprintf("sec-evil-%d", i)
	port := peertest.FreePort(t)
	self, evil := peertest.IP(0), peertest.IP(i)
	createNode(ctx, t, kenv, selfNode, self, nil)
	createNode(ctx, t, kenv, evilNode, evil, map[string]string{model.LabelKey(name): "warm"})

	// The malicious peer: every file at its true size, each answer hostile.
	var asked atomic.Int64
	ln, err := net.Listen("tcp", net.JoinHostPort(evil, port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, ok := files[r.URL.Query().Get("file")]
		if r.URL.Path != peer.WeightsPath || !ok {
			http.NotFound(rw, r)
			return
		}
		asked.Add(1)
		answer(rw, r, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	token := filepath.Join(w.Work, "token")
	if err := os.WriteFile(token, []byte("any-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := w.Config(map[string]string{
		"nodeName":  selfNode,
		"s3":        b.S3Section(),
		"models":    ModelsSection(map[string]string{"name": name, "source": b.URL("m/")}),
		"readiness": fmt.Sprintf("{kubeconfig: %s, resync: 10s}", quoteYAML(kenv.Kubeconfig(t, "warmd-"+selfNode, w.Work))),
		"peers":     fmt.Sprintf("{enabled: true, listen: '%s:%s', tokenFile: %s, seedWait: 5s}", self, port, quoteYAML(token)),
		"prewarm":   "{disabled: true}",
	})
	start := time.Now()
	d := w.StartDaemon(cfg)
	st := d.WaitModels(2*time.Minute, name)[name]
	took := time.Since(start)
	hwm := vmHWM(t, d)
	d.Stop()

	if st.State != prefetch.StateReady {
		t.Fatalf("%s: %s (%s), want ready from the origin\n%s", name, st.State, st.Reason, tail(d.Log(), 3000))
	}
	if asked.Load() == 0 {
		t.Fatal("the malicious peer was never asked: the case tests nothing")
	}
	snaps, _ := filepath.Glob(filepath.Join(w.DataDir, "weights", fmt.Sprintf("models--sec--peer-%d", i), "snapshots", "*"))
	if len(snaps) != 1 {
		t.Fatalf("snapshots %v, want one", snaps)
	}
	for f, want := range files {
		got, err := os.ReadFile(filepath.Join(snaps[0], f))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("published %s differs from the origin's (%v)", f, err)
		}
	}
	report, _ := json.Marshal(st)
	if !strings.Contains(string(report), evil) || !strings.Contains(string(report), evil+":"+port+": "+reason) {
		t.Errorf("the model's status does not report the peer %s dropped (%s): %s", evil, reason, report)
	}
	if st.From == nil || st.From.PeerBytes != 0 || len(st.From.Peers) != 0 {
		t.Errorf("the model's status credits the corrupt peer with delivering bytes: %s", report)
	}
	if !strings.Contains(d.Log(), "peer dropped from this download") || !strings.Contains(d.Log(), "reason="+reason) ||
		!strings.Contains(d.Log(), why) {
		t.Errorf("the log does not report the dropped peer (reason=%s, why %q)", reason, why)
		t.Errorf("log:\n%s", tail(d.Log(), 3000))
	}
	t.Logf("peer asked %d times; ready in %s; warmd's peak RSS %d MiB; status %s", asked.Load(), took.Round(time.Millisecond), hwm>>20, report)
	if took > time.Minute {
		t.Errorf("ready after %s, bound 1m", took)
	}
	if hwm > 256<<20 {
		t.Errorf("warmd's peak RSS %d MiB, bound 256 MiB", hwm>>20)
	}
	w.Check()
}

// createNode creates Node name with labels and its InternalIP ip (status: written through the
// status subresource, as a kubelet does).
func createNode(ctx context.Context, t *testing.T, kenv *kubeenv.Env, name, ip string, labels map[string]string) {
	t.Helper()
	created, err := kenv.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	if _, err := kenv.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// vmHWM is the daemon's peak resident set in bytes (VmHWM: its own, since exec; ru_maxrss would
// count the test process's memory shared before exec).
func vmHWM(t *testing.T, d *Daemon) int64 {
	t.Helper()
	kib, err := procstat.StatusKiB(d.cmd.Process.Pid, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	return kib << 10
}
