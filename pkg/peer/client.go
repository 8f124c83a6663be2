package peer

import (
	"net/http"
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
