// Package peertest holds what the peer test worlds share (the weights source's in
// pkg/prefetch/weights/source/peer and the compile cache's in pkg/cache): nodes are loopback addresses
// 127.0.0.11..19 sharing one peer port, as Node InternalIPs with one node port would, and Node objects
// on a real kube-apiserver that say where each node is and what it claims warm.
package peertest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/kube"
)

// IP is the loopback address of node i (1..9) of a test world.
func IP(i int) string { return fmt.Sprintf("127.0.0.%d", 10+i) }

// FreePort finds a port free on 127.0.0.11..30 (the addresses of up to 20 nodes).
func FreePort(t testing.TB) string {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.11:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		ln.Close()
		ok := true
		for i := 12; i <= 30 && ok; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%s", i, port))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on every node address")
	return ""
}

// CreateNode creates the Node name with InternalIP ip and labels, as the kubelet and readiness would.
func CreateNode(t testing.TB, c kube.Interface, name, ip string, labels map[string]string) {
	t.Helper()
	_, err := c.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// Get sends method to url as a peer would (a bearer token unless token is "", a Range unless rng is
// "") and returns the response with its whole body read.
func Get(t testing.TB, method, url, token, rng string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// Corrupting wraps a peer server so that each GET's answer has one byte flipped (its first write's
// middle byte), as a broken or hostile peer sends: only the digest can tell.
func Corrupting(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w = &flipOnce{ResponseWriter: w}
		}
		h.ServeHTTP(w, r)
	})
}

type flipOnce struct {
	http.ResponseWriter
	done bool
}

func (f *flipOnce) Write(p []byte) (int, error) {
	if !f.done && len(p) > 0 {
		q := append([]byte(nil), p...)
		q[len(q)/2] ^= 0xff
		f.done = true
		return f.ResponseWriter.Write(q)
	}
	return f.ResponseWriter.Write(p)
}
