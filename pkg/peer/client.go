package peer

import (
	"net/http"
	"strconv"
	"time"
)

// DefaultHeaderTimeout is how long a fetching side waits for a peer's answer headers: a serving
// peer answers at once (or 503 when its slots are held), and its first body piece may wait a moment
// for the upload cap, which holds the headers back with it.
const DefaultHeaderTimeout = 10 * time.Second

// NewClient is the HTTP client every fetching side reads peers with (weight chunks, compile-cache
// bundles, image layer blobs), so they behave alike. It never uses a proxy: peer traffic goes node to
// node on the cluster network, and HTTP_PROXY/HTTPS_PROXY, set on a node for its way out, must not
// carry it (http.DefaultClient would send it there). headerTimeout bounds the wait for an answer's
// headers; callers bound the body with pkg/bounded.
func NewClient(headerTimeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 nil, // direct, whatever the environment says
		ResponseHeaderTimeout: headerTimeout,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       time.Minute,
	}}
}

// Bounds of a busy peer's Retry-After: asked again after at least a second, at most half a minute
// (a peer that claims longer is asked sooner: its slots may free early).
const (
	MinRetryAfter = time.Second
	MaxRetryAfter = 30 * time.Second
)

// BusyAnswer reports whether resp is a serving node's busy answer (503 with Retry-After in seconds:
// every serving slot is taken by other downloaders, pkg/peer/serve) and when to ask again, within
// MinRetryAfter..MaxRetryAfter. A busy peer is fine: a fetching side rests it and asks again, it
// does not drop it. A 503 without Retry-After (the peer could not check the token) is a failure.
func BusyAnswer(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	secs, err := strconv.Atoi(v)
	if err != nil {
		return MinRetryAfter, true // an HTTP date: not what warmd sends; ask again soon
	}
	return min(max(time.Duration(secs)*time.Second, MinRetryAfter), MaxRetryAfter), true
}
