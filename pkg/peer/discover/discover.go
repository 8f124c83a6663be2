// Package discover finds warm peers from the Node objects and reads the token presented to them. Both
// fetching sides — the weights source (pkg/prefetch/weights/source/peer) and the compile-cache restore
// (pkg/cache) — ask the same question of the API server: which other nodes claim, by the labels warmd
// wrote on them, to hold what this node needs, and at which InternalIP do they serve it. The Kubernetes
// API is the directory; an address is used only for a Node whose labels claim the content.
package discover

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
)

// Peers returns the base URLs (http://InternalIP:port) of up to k nodes other than self that the label
// selector sel matches and keep (nil: all) accepts, in random order so a node group spreads its load
// over every warm node rather than the first k. rv is the list's resourceVersion: "" a consistent read,
// "0" the API server's watch cache (for lookups repeated during a fetch, no etcd read).
func Peers(ctx context.Context, c kube.Interface, sel, self, port string, k int, rv string, keep func(*corev1.Node) bool) ([]string, error) {
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv})
	if err != nil {
		return nil, fmt.Errorf("find peers: list nodes with %s: %w", sel, err)
	}
	var out []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Name == self || (keep != nil && !keep(n)) {
			continue
		}
		if ip := InternalIP(n); ip != "" {
			out = append(out, "http://"+net.JoinHostPort(ip, port))
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:min(k, len(out))], nil
}

// CompileCache returns up to k peers that advertise the compile cache of sku warm: their GPU SKU label
// is sku's and at least one model label says "warm", which readiness writes only when the model's
// compile cache for the node's SKU is on disk (with caches on). A peer that does not hold a bundle
// answers 404 and the restore moves on; the bytes of one that does are verified against the origin's
// digest, so a wrong claim costs a request, never a wrong file.
func CompileCache(ctx context.Context, c kube.Interface, sku, self, port string, k int) ([]string, error) {
	sel := nodelabels.LabelSKU + "=" + nodelabels.Value(sku)
	return Peers(ctx, c, sel, self, port, k, "", func(n *corev1.Node) bool {
		for key, v := range n.Labels {
			if strings.HasPrefix(key, model.LabelPrefix) && v == "warm" {
				return true
			}
		}
		return false
	})
}

// InternalIP is the Node's first valid InternalIP address ("" when it has none).
func InternalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address) != nil {
			return a.Address
		}
	}
	return ""
}

// TokenFile reads a projected ServiceAccount token, again once MaxAge passed: the kubelet rotates the
// file well before the token expires (at 80% of its life), so a minute-old copy is always valid.
type TokenFile struct {
	Path string
	// MaxAge is how long a read token is reused. Default 1m.
	MaxAge time.Duration
	mu     sync.Mutex
	tok    string
	read   time.Time
}

// Token returns the token.
func (t *TokenFile) Token() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	age := t.MaxAge
	if age <= 0 {
		age = time.Minute
	}
	if t.tok != "" && time.Since(t.read) < age {
		return t.tok, nil
	}
	b, err := os.ReadFile(t.Path)
	if err != nil {
		return "", fmt.Errorf("read peer token (peers.tokenFile): %w", err)
	}
	if len(b) > 16<<10 {
		return "", fmt.Errorf("peer token %s: %d bytes is not a token", t.Path, len(b))
	}
	t.tok, t.read = strings.TrimSpace(string(b)), time.Now()
	return t.tok, nil
}
