package peer

import (
	"fmt"
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

// BusyError is a serving node's busy answer (503 with Retry-After in seconds: every serving slot
// is taken by other downloaders, pkg/peer/serve): no bytes came, and the peer is fine. A fetching
// side rests the peer until After and asks again; it does not drop it.
type BusyError struct {
	// After is when to ask again, within MinRetryAfter..MaxRetryAfter.
	After time.Duration
	// File: only the file asked for is busy there (HeaderBusyFile); others may be asked at once.
	File bool
}

func (e *BusyError) Error() string { return fmt.Sprintf("peer busy, retry after %s", e.After) }

// Busy returns a *BusyError when resp is a serving node's busy answer, nil otherwise. A 503
// without Retry-After (the peer could not check the token) is a failure, not busy: nil.
func Busy(resp *http.Response) error {
	if resp.StatusCode != http.StatusServiceUnavailable {
		return nil
	}
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return nil
	}
	secs, err := strconv.Atoi(v)
	if err != nil {
		return &BusyError{After: MinRetryAfter, File: resp.Header.Get(HeaderBusyFile) == "1"} // an HTTP date: not what warmd sends; ask again soon
	}
	return &BusyError{After: min(max(time.Duration(secs)*time.Second, MinRetryAfter), MaxRetryAfter), File: resp.Header.Get(HeaderBusyFile) == "1"}
}
