// Package bounded bounds what warmd reads from a server it does not control — an S3 endpoint, a warm
// peer — in time, size and shape, so a hostile or broken answer costs one request, never the node:
//
//   - Client wraps an HTTP client so every request fails with a StallError once it has spent Stall
//     waiting on the network while receiving fewer than MinBytes (a server that sends nothing, or one
//     byte every two seconds), error bodies (status >= 300) are cut to a few KiB, and a body longer
//     than a limit the caller puts on the context fails instead of filling memory;
//   - Text and Err render outside text (an error body, a server's message) cut and with every
//     control or invalid byte escaped, for logs and status;
//   - CheckEncoding refuses a Content-Encoding (gzip, br, …): warmd stores bytes byte for byte and
//     verifies them against checksums of the stored object, so an encoded body is neither decoded
//     (a small gzip is a bomb of any size) nor taken as the object's bytes;
//   - CheckRange refuses an answer to a ranged GET whose status, Content-Range or Content-Length is
//     not the range asked for.
//
// It owns no policy: callers decide to retry, drop a source or fail (docs/security.md, "Bounds on S3
// and peer answers").
package bounded

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Defaults of Client.
const (
	// DefaultMinBytes is the progress a request must make per Stall of waiting: 64 KiB. A healthy
	// link sends that in milliseconds; one byte every two seconds is 15 bytes in 30 s.
	DefaultMinBytes = 64 << 10
	// DefaultErrorBody is how much of an error body (status >= 300) is read: S3's XML errors are a
	// few hundred bytes, so 4 KiB keeps the code and message and drops a 300 MB flood.
	DefaultErrorBody = 4 << 10
	// DefaultTextMax is how many bytes of outside text Text keeps.
	DefaultTextMax = 512
)

// ErrTooLong marks a body longer than the caller's limit (WithBodyLimit) or than the range asked.
var ErrTooLong = errors.New("answer longer than asked")

// ErrEncoded marks a body with a Content-Encoding warmd does not take.
var ErrEncoded = errors.New("encoded body refused")

// ErrRange marks an answer that is not the range asked for.
var ErrRange = errors.New("answer is not the range asked for")

// CheckEncoding returns an error wrapping ErrEncoded unless v (a Content-Encoding header) is empty,
// "identity" or "aws-chunked" (an upload framing some S3-compatible stores echo back; the bytes are
// still the object's).
func CheckEncoding(v string) error {
	for _, tok := range strings.Split(v, ",") {
		switch strings.ToLower(strings.TrimSpace(tok)) {
		case "", "identity", "aws-chunked":
		default:
			return fmt.Errorf("%w: Content-Encoding %s (warmd stores and verifies the bytes as stored and decodes no gzip, br or deflate)", ErrEncoded, Text(v, 64))
		}
	}
	return nil
}

// CheckRange checks the head of an answer to a GET of n bytes from off: a 206 whose Content-Range
// starts at off and ends at off+n-1, or (off 0 only) a 200 of exactly n bytes, a server that ignored
// Range for an object no longer than the range. contentLength is -1 when the answer gave none.
func CheckRange(status int, contentRange string, contentLength, off, n int64) error {
	if contentLength >= 0 && contentLength != n {
		return fmt.Errorf("%w: Content-Length %d for a range of %d bytes", ErrRange, contentLength, n)
	}
	switch status {
	case http.StatusPartialContent:
		a, b, ok := parseContentRange(contentRange)
		if !ok || a != off || b != off+n-1 {
			return fmt.Errorf("%w: Content-Range %s, asked bytes %d-%d", ErrRange, Text(contentRange, 96), off, off+n-1)
		}
	case http.StatusOK:
		if off != 0 || contentLength != n {
			return fmt.Errorf("%w: the whole object (status 200, Content-Length %d) for bytes %d-%d", ErrRange, contentLength, off, off+n-1)
		}
	default:
		return fmt.Errorf("%w: status %d to a range request", ErrRange, status)
	}
	return nil
}

// parseContentRange reads "bytes a-b/total" (total may be "*").
func parseContentRange(v string) (a, b int64, ok bool) {
	spec, found := strings.CutPrefix(v, "bytes ")
	rng, _, slash := strings.Cut(spec, "/")
	as, bs, dash := strings.Cut(rng, "-")
	if !found || !slash || !dash {
		return 0, 0, false
	}
	a, err1 := strconv.ParseInt(as, 10, 64)
	b, err2 := strconv.ParseInt(bs, 10, 64)
	return a, b, err1 == nil && err2 == nil && a >= 0 && b >= a
}

// Text renders outside text for a log line or an error: control characters, invalid UTF-8 and
// anything unprintable escaped Go-style, cut to at most max bytes (DefaultTextMax when max <= 0)
// with a note of how much was left out.
func Text(s string, max int) string {
	if max <= 0 {
		max = DefaultTextMax
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		var piece string
		switch {
		case r == utf8.RuneError && size == 1:
			piece = fmt.Sprintf(`\x%02x`, s[i])
		case r == ' ' || (unicode.IsPrint(r) && r != '\\'):
			piece = s[i : i+size]
		default:
			q := strconv.QuoteRuneToASCII(r)
			piece = q[1 : len(q)-1]
		}
		if b.Len()+len(piece) > max {
			fmt.Fprintf(&b, "…(%d more bytes cut)", len(s)-i)
			return b.String()
		}
		b.WriteString(piece)
		i += size
	}
	return b.String()
}

// Err wraps err so that its message is Text(err.Error(), max): errors.Is and errors.As still see
// err, while what is printed stays bounded and escaped whatever a server put into it.
func Err(err error, max int) error {
	if err == nil {
		return nil
	}
	return &cutError{err: err, max: max}
}

type cutError struct {
	err error
	max int
}

func (e *cutError) Error() string { return Text(e.err.Error(), e.max) }
func (e *cutError) Unwrap() error { return e.err }

type limitKey struct{}

// WithBodyLimit returns a context under which a Client fails a 2xx body longer than n bytes (a
// listing page, a manifest) with ErrTooLong instead of reading it whole.
func WithBodyLimit(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, limitKey{}, n)
}

func bodyLimit(ctx context.Context) (int64, bool) {
	n, ok := ctx.Value(limitKey{}).(int64)
	return n, ok
}
