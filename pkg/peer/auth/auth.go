// Package auth decides who may read from a warmd peer server: only warmd's own pods. A caller presents
// a projected ServiceAccount token issued for the peer audience; the API server checks it
// (TokenReview, authentication/v1) and names the identity; only the configured ServiceAccount passes.
// Verdicts are cached (positive for a minute, negative shorter, a bounded number of tokens) so a
// download of thousands of chunks costs one review, not one per chunk. The API server, not this
// package, decides whether a token is valid.
package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/kube"
)

// Verdict is the outcome of one check.
type Verdict int

// Verdicts: OK passes; Unauthenticated (HTTP 401) is no token, or one the API server does not accept
// for the audience; Forbidden (HTTP 403) is a valid token of another identity.
const (
	OK Verdict = iota
	Unauthenticated
	Forbidden
)

// Defaults of Options.
const (
	DefaultPositiveTTL = time.Minute
	DefaultNegativeTTL = 10 * time.Second
	DefaultMaxEntries  = 1024
)

// ErrReview is wrapped by Check when the API server could not be asked (the verdict is not cached).
var ErrReview = errors.New("token review failed")

// Options configure a Reviewer.
type Options struct {
	// Audience the tokens must be issued for.
	Audience string
	// Username is the only identity that passes (system:serviceaccount:NS:NAME).
	Username string
	// PositiveTTL and NegativeTTL bound how long a verdict is reused; a revoked token keeps working for
	// at most PositiveTTL. Defaults 1m and 10s.
	PositiveTTL, NegativeTTL time.Duration
	// MaxEntries bounds the cache (a flood of random tokens must not grow memory). Default 1024.
	MaxEntries int
	Now        func() time.Time
}

// Reviewer checks tokens through the API server, with a cache.
type Reviewer struct {
	client kube.Interface
	opts   Options

	mu    sync.Mutex
	cache map[[32]byte]entry
}

type entry struct {
	v       Verdict
	reason  string
	expires time.Time
}

// New returns a Reviewer asking through client (the daemon's one API client).
func New(client kube.Interface, opts Options) (*Reviewer, error) {
	if client == nil {
		return nil, errors.New("peer auth: no API client (peers need the API server)")
	}
	if opts.Audience == "" || opts.Username == "" {
		return nil, errors.New("peer auth: audience and username are required")
	}
	if opts.PositiveTTL <= 0 {
		opts.PositiveTTL = DefaultPositiveTTL
	}
	if opts.NegativeTTL <= 0 {
		opts.NegativeTTL = DefaultNegativeTTL
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Reviewer{client: client, opts: opts, cache: map[[32]byte]entry{}}, nil
}

// Check returns the verdict for a bearer token and, when it is not OK, why (for the log and the
// response body; it never holds the token). An error (wrapping ErrReview) means the API server could
// not be asked: the caller answers 503, and nothing is cached.
func (r *Reviewer) Check(ctx context.Context, token string) (Verdict, string, error) {
	if token == "" {
		return Unauthenticated, "no bearer token", nil
	}
	key := sha256.Sum256([]byte(token))
	now := r.opts.Now()
	r.mu.Lock()
	if e, ok := r.cache[key]; ok && now.Before(e.expires) {
		r.mu.Unlock()
		return e.v, e.reason, nil
	}
	r.mu.Unlock()
	tr, err := r.client.AuthenticationV1().TokenReviews().Create(ctx, &authv1.TokenReview{
		Spec: authv1.TokenReviewSpec{Token: token, Audiences: []string{r.opts.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return Unauthenticated, "", fmt.Errorf("%w: %w", ErrReview, err)
	}
	e := r.verdict(tr.Status)
	if e.v == OK {
		e.expires = now.Add(r.opts.PositiveTTL)
	} else {
		e.expires = now.Add(r.opts.NegativeTTL)
	}
	r.store(key, e, now)
	return e.v, e.reason, nil
}

func (r *Reviewer) verdict(st authv1.TokenReviewStatus) entry {
	switch {
	case !st.Authenticated:
		why := "token not valid for audience " + r.opts.Audience
		if st.Error != "" {
			why += ": " + st.Error
		}
		return entry{v: Unauthenticated, reason: why}
	case !slices.Contains(st.Audiences, r.opts.Audience):
		return entry{v: Unauthenticated, reason: "token not issued for audience " + r.opts.Audience}
	case st.User.Username != r.opts.Username:
		return entry{v: Forbidden, reason: fmt.Sprintf("%s may not read from peers (only %s)", st.User.Username, r.opts.Username)}
	}
	return entry{v: OK}
}

// store keeps e, first dropping expired entries and then, if still full, arbitrary ones.
func (r *Reviewer) store(key [32]byte, e entry, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= r.opts.MaxEntries {
		for k, old := range r.cache {
			if !now.Before(old.expires) {
				delete(r.cache, k)
			}
		}
		for k := range r.cache {
			if len(r.cache) < r.opts.MaxEntries {
				break
			}
			delete(r.cache, k)
		}
	}
	r.cache[key] = e
}

// Len is the number of cached verdicts (for tests of the bound).
func (r *Reviewer) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cache)
}
