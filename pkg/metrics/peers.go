package metrics

import "github.com/prometheus/client_golang/prometheus"

// Peers holds fleet peer-distribution metrics: what this node served to peers and refused, and where
// the bytes of its own downloads came from. Labels are bounded: reasons and sources are fixed sets,
// models come from the config.
type Peers struct {
	// ServedBytes counts bytes of published weights, kept compile-cache bundles and pinned images'
	// layers this node sent to peers.
	ServedBytes prometheus.Counter
	// Refused counts peer requests refused, by reason (unauthenticated, forbidden, bad_request,
	// not_found, review_error, busy: every serving slot held by other downloaders).
	Refused *prometheus.CounterVec
	// FetchedBytes counts bytes this node's downloads received, by model ("compile-cache" for bundle
	// restores) and from (peer, origin).
	FetchedBytes *prometheus.CounterVec
	// Dropped counts peers dropped from a fetch, by reason (corrupt: bytes failed verification;
	// error: the peer failed or refused a request).
	Dropped *prometheus.CounterVec
}

func newPeers(reg prometheus.Registerer) *Peers {
	p := &Peers{
		ServedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmd_peer_served_bytes_total", Help: "Bytes of verified, published weights, kept compile-cache bundles and layers of pinned images served to other warmd peers.",
		}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_peer_refused_requests_total", Help: "Peer requests refused, by reason (unauthenticated, forbidden, bad_request, not_found, review_error, busy, yield, spread).",
		}, []string{"reason"}),
		FetchedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_peer_fetched_bytes_total", Help: "Bytes of weights downloads by model, and of compile-cache bundle restores (model=\"compile-cache\") and image layers (model=\"image\"), by where they came from (peer, origin).",
		}, []string{"model", "from"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmd_peer_dropped_total", Help: "Peers dropped from a download, by reason (corrupt bytes, error).",
		}, []string{"reason"}),
	}
	reg.MustRegister(p.ServedBytes, p.Refused, p.FetchedBytes, p.Dropped)
	return p
}
