package phases

import (
	"strings"
	"time"
)

// Clock domains. A line's time is read from the best clock the log has. With an outer clock (CRI,
// kubectl, journald, collector, syslog) every line of one container carries the same clock, so one
// container is one domain. Without one, each line's time is vLLM's own header, written by the clock
// of the host that printed it: a data-parallel rank or a Ray worker on another node (ip=…) may run
// tens of seconds ahead or behind the API server's host. Such a rank is its own domain.
//
// Phases are measured only across domains that agree with the primary one (the API server's, which
// decides when the server is ready): a domain whose lines arrive with times more than skewTolerance
// out of step with the primary's is left out of the waterfall (its reported numbers still count),
// and so is another container's that runs its own API server (a second start merged into the log).
// A line without a time of its own (tqdm, uvicorn, tracebacks) takes the last time of its own process,
// else of its own domain, never another domain's.

// skewTolerance is how far out of order two domains' lines may be before their clocks count as
// different: vLLM's clock has 1 s steps and flushes each record; Ray forwards remote lines late by
// well under that (its "[repeated …]" summaries, later still, are not used for this check).
const skewTolerance = 5 * time.Second

// Bounds for hostile logs with endless distinct prefixes: past them, lines share an overflow key.
const (
	maxDomains = 64
	maxProcs   = 1024
	overflow   = "\x00overflow"
)

// clocks tracks the last own time per process and per domain, and which domains disagree.
type clocks struct {
	procLast map[string]time.Time
	domLast  map[string]time.Time
	order    []string           // domains in the order they were first timed
	skewed   map[[2]string]bool // unordered pairs whose clocks disagree
	primary  string             // the API server's domain, once seen
	hasPrim  bool
	api      map[string]bool // domains that printed API-server lines
}

func newClocks() clocks {
	return clocks{procLast: map[string]time.Time{}, domLast: map[string]time.Time{}, skewed: map[[2]string]bool{}, api: map[string]bool{}}
}

// domainKey names a line's clock domain (see above). outerClock says whether times come from a wrapper.
func domainKey(outerClock bool, o outer, in inner) string {
	if outerClock {
		return o.source
	}
	return o.source + "|" + in.host + "|" + in.dp
}

func (c *clocks) bound(dom string) string {
	if _, ok := c.domLast[dom]; !ok && len(c.domLast) >= maxDomains {
		return overflow
	}
	return dom
}

// own records a line's own time in its process and domain and checks the domain against the others.
func (c *clocks) own(proc, dom string, t time.Time, repeated bool) {
	if _, ok := c.procLast[proc]; !repeated && (ok || len(c.procLast) < maxProcs) {
		c.procLast[proc] = t
	}
	last, seen := c.domLast[dom]
	if !seen {
		c.order = append(c.order, dom)
	}
	if !repeated {
		for e, et := range c.domLast {
			if e != dom && t.Before(et.Add(-skewTolerance)) {
				c.skewed[pair(dom, e)] = true
			}
		}
	}
	if !seen || t.After(last) {
		c.domLast[dom] = t
	}
}

// at returns the time for a line without one of its own: its process's last, else its domain's.
// A line without a process prefix (named false) may come from any process of the domain (a tqdm bar
// wrapped onto a new line, an old log without prefixes): it takes the domain's latest time.
func (c *clocks) at(proc, dom string, named bool) (time.Time, bool) {
	if t, ok := c.procLast[proc]; ok && named {
		return t, true
	}
	t, ok := c.domLast[dom]
	return t, ok
}

// markPrimary makes dom the primary domain the first time an API-server line is seen.
func (c *clocks) markPrimary(dom string) {
	if !c.hasPrim {
		c.primary, c.hasPrim = dom, true
	}
	if len(c.api) < maxDomains {
		c.api[source(dom)] = true
	}
}

// source is the container part of a domain key (see domainKey).
func source(dom string) string {
	if i := strings.IndexByte(dom, '|'); i >= 0 {
		return dom[:i]
	}
	return dom
}

// included returns the domains whose milestones make up the waterfall: the primary one (the API
// server's, else the first timed) and every domain that agrees with it.
func (c *clocks) included() map[string]bool {
	prim, ok := c.primary, c.hasPrim
	if !ok && len(c.order) > 0 {
		prim, ok = c.order[0], true
	}
	out := map[string]bool{}
	if !ok {
		return out
	}
	out[prim] = true
	for _, d := range c.order {
		// Another container with its own API server is another start (docker compose logs of two
		// services), not a rank of this one.
		other := source(d) != source(prim) && c.api[source(d)]
		if !c.skewed[pair(prim, d)] && !other {
			out[d] = true
		}
	}
	return out
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}
