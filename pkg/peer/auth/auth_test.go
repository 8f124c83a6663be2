package auth_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/peer/auth"
)

const audience = "warmd.io/peer"

// The API server decides: warmd's own token for the peer audience passes; a token for another
// audience, a garbage token and no token are 401; another ServiceAccount's valid token is 403.
// Verdicts are cached: a second check does not ask again.
func TestReviewAgainstRealAPIServer(t *testing.T) {
	env := kubeenv.Start(t)
	good := env.Token(t, "warmd", "warmd", audience)
	otherAud := env.Token(t, "warmd", "warmd", "https://kubernetes.default.svc")
	otherSA := env.Token(t, "default", "intruder", audience)

	var n atomic.Int64
	now := time.Unix(1000, 0)
	r, err := auth.New(counting(t, env.Config, &n), auth.Options{Audience: audience,
		Username: "system:serviceaccount:warmd:warmd", MaxEntries: 3, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name, token string
		want        auth.Verdict
	}{
		{"own token", good, auth.OK},
		{"other audience", otherAud, auth.Unauthenticated},
		{"garbage", "not-a-jwt", auth.Unauthenticated},
		{"no token", "", auth.Unauthenticated},
		{"other service account", otherSA, auth.Forbidden},
	} {
		v, why, err := r.Check(ctx, tc.token)
		if err != nil || v != tc.want {
			t.Errorf("%s: verdict %d (%s), %v; want %d", tc.name, v, why, err, tc.want)
		}
		if v != auth.OK && why == "" {
			t.Errorf("%s: refused without a reason", tc.name)
		}
	}
	if n.Load() != 4 {
		t.Errorf("%d reviews for 4 distinct tokens", n.Load())
	}
	if r.Len() > 3 {
		t.Errorf("cache holds %d entries, bound 3", r.Len())
	}
	before := n.Load()
	if v, _, _ := r.Check(ctx, otherSA); v != auth.Forbidden || n.Load() != before {
		t.Errorf("cached verdict: %d, reviews %d -> %d", v, before, n.Load())
	}
	now = now.Add(2 * time.Minute) // every verdict expired
	if v, _, _ := r.Check(ctx, good); v != auth.OK || n.Load() != before+1 {
		t.Errorf("after expiry: %d, reviews %d -> %d; want one new review", v, before, n.Load())
	}
}

// counting returns a client of the real API server that counts TokenReview creates.
func counting(t *testing.T, cfg *rest.Config, n *atomic.Int64) kube.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/tokenreviews") {
				n.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	c, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
