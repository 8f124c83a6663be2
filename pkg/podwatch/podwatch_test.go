package podwatch_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/podwatch"
)

// podRequests counts the pod LISTs and WATCHes a client sends.
type podRequests struct {
	inner          http.RoundTripper
	lists, watches atomic.Int32
}

func (c *podRequests) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/pods") {
		if r.URL.Query().Get("watch") == "true" {
			c.watches.Add(1)
		} else {
			c.lists.Add(1)
		}
	}
	return c.inner.RoundTrip(r)
}

// TestOneWatchForEveryPart: on a real API server, two subscribers share one watch of
// the node's pods and both hear of a new pod; the watch lives while one subscriber is left, stops
// with the last, and a later subscriber starts a fresh one. Pods of other nodes are never listed.
func TestOneWatchForEveryPart(t *testing.T) {
	env := kubeenv.Start(t)
	cfg := rest.CopyConfig(env.Config)
	counts := &podRequests{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { counts.inner = rt; return counts }
	cs, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := podwatch.New(cs, "n1")
	a, err := w.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	createPod(t, env.Client, "p1", "n1")
	createPod(t, env.Client, "elsewhere", "n2")
	waitPods(t, a, "p1")
	waitPods(t, b, "p1")
	// client-go lists through a WATCH (sendInitialEvents) where the WatchListClient feature is on,
	// and with a LIST then a WATCH where it is off: one WATCH either way, and at most one LIST.
	if l, wt := counts.lists.Load(), counts.watches.Load(); l > 1 || wt != 1 {
		t.Errorf("two subscribers: %d LISTs and %d WATCHes of pods, want one WATCH and at most one LIST", l, wt)
	}

	a.Close()
	a.Close() // twice is harmless
	createPod(t, env.Client, "p2", "n1")
	waitPods(t, b, "p1", "p2")
	b.Close()
	if wt := counts.watches.Load(); wt != 1 {
		t.Errorf("%d WATCHes while one subscriber was left, want 1", wt)
	}

	createPod(t, env.Client, "p3", "n1")
	c, err := w.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitPods(t, c, "p1", "p2", "p3")
	if wt := counts.watches.Load(); wt != 2 {
		t.Errorf("%d WATCHes after the watch stopped and a new subscriber came, want 2 (the first stopped with its last subscriber)", wt)
	}
}

func createPod(t *testing.T, cs kube.Interface, name, node string) {
	t.Helper()
	_, err := cs.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// waitPods waits, on the subscription's pokes, until it lists exactly the named pods.
func waitPods(t *testing.T, s podwatch.Subscription, names ...string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if s.Synced() {
			pods, err := s.Pods()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, p := range pods {
				got[p.Name] = true
			}
			ok := len(got) == len(names)
			for _, n := range names {
				ok = ok && got[n]
			}
			if ok {
				return
			}
		}
		select {
		case <-s.Changed():
		case <-time.After(time.Second): // a poke may have been taken by an earlier wait
		case <-deadline:
			pods, _ := s.Pods()
			t.Fatalf("pods %v after 30s, want %v", podNames(pods), names)
		}
	}
}

func podNames(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}
