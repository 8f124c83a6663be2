package serve

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// MaxRanges bounds the ranges one request may ask for after coalescing. warmd's own fetchers ask
// for one; a multipart answer of thousands of one-byte ranges costs its part headers many times
// the file (4,000 ranges were 9x), so beyond this the request is refused with 416.
const MaxRanges = 8

// maxSpecs bounds the range specs parsed at all, before coalescing (bounded work per request).
const maxSpecs = 64

type span struct{ a, b int64 } // inclusive

// limitRanges coalesces the request's Range header (overlapping and adjacent ranges merged) for a
// file of size bytes and rewrites it, or answers 416 and returns false when more than MaxRanges
// remain or more than maxSpecs were sent. A header it cannot parse is left to http.ServeContent,
// which ignores or refuses it.
func (h *Handler) limitRanges(w http.ResponseWriter, r *http.Request, size int64) bool {
	v := r.Header.Get("Range")
	spec, ok := strings.CutPrefix(v, "bytes=")
	if v == "" || !ok {
		return true
	}
	parts := strings.Split(spec, ",")
	if len(parts) > maxSpecs {
		h.tooMany(w, size, len(parts))
		return false
	}
	var rs []span
	for _, p := range parts {
		s, ok := parseSpan(strings.TrimSpace(p), size)
		if !ok {
			return true
		}
		if s.a < size && s.a <= s.b {
			rs = append(rs, s) // an unsatisfiable one is ServeContent's to drop
		}
	}
	if len(rs) == 0 {
		return true
	}
	slices.SortFunc(rs, func(x, y span) int { return cmp.Compare(x.a, y.a) })
	merged := rs[:1]
	for _, x := range rs[1:] {
		last := &merged[len(merged)-1]
		if x.a <= last.b+1 {
			last.b = max(last.b, x.b)
			continue
		}
		merged = append(merged, x)
	}
	if len(merged) > MaxRanges {
		h.tooMany(w, size, len(merged))
		return false
	}
	out := make([]string, len(merged))
	for i, x := range merged {
		out[i] = fmt.Sprintf("%d-%d", x.a, x.b)
	}
	r.Header.Set("Range", "bytes="+strings.Join(out, ","))
	return true
}

// parseSpan reads one "a-b", "a-" or "-n" against a file of size bytes.
func parseSpan(p string, size int64) (span, bool) {
	as, bs, dash := strings.Cut(p, "-")
	if !dash {
		return span{}, false
	}
	if as == "" { // suffix: the last bs bytes
		n, err := strconv.ParseInt(bs, 10, 64)
		if err != nil || n <= 0 {
			return span{}, false
		}
		return span{max(size-n, 0), size - 1}, true
	}
	a, err := strconv.ParseInt(as, 10, 64)
	if err != nil || a < 0 {
		return span{}, false
	}
	b := size - 1
	if bs != "" {
		if b, err = strconv.ParseInt(bs, 10, 64); err != nil || b < a {
			return span{}, false
		}
		b = min(b, size-1)
	}
	return span{a, b}, true
}

func (h *Handler) tooMany(w http.ResponseWriter, size int64, n int) {
	w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
	h.refuse(w, http.StatusRequestedRangeNotSatisfiable, ReasonBadRequest,
		fmt.Sprintf("%d ranges in one request; at most %d (coalesced) are served", n, MaxRanges))
}
