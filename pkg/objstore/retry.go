package objstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"warmd.io/warmd/pkg/bounded"
)

// Backoff is the retry policy for one operation: full-jitter exponential backoff (AWS's recommended
// shape), so many workers hitting a throttled store do not retry in lockstep.
type Backoff struct {
	// Attempts bounds tries per operation, the first included. Default 8.
	Attempts int
	// Base is the first backoff ceiling. Default 100ms.
	Base time.Duration
	// Max caps one backoff. Default 5s.
	Max time.Duration
}

// DefaultBackoff rides out a few seconds of 503 SlowDown or a restarting endpoint without making a
// permanent error take long to surface.
var DefaultBackoff = Backoff{Attempts: 8, Base: 100 * time.Millisecond, Max: 5 * time.Second}

func (b Backoff) withDefaults() Backoff {
	if b.Attempts <= 0 {
		b.Attempts = DefaultBackoff.Attempts
	}
	if b.Base <= 0 {
		b.Base = DefaultBackoff.Base
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoff.Max
	}
	return b
}

// Delay returns the jittered wait before retry number n (1-based).
func (b Backoff) Delay(n int) time.Duration {
	b = b.withDefaults()
	ceil := b.Base << min(n-1, 20)
	if ceil > b.Max || ceil <= 0 {
		ceil = b.Max
	}
	return time.Duration(rand.Int64N(int64(ceil)) + 1)
}

// Do runs op until it succeeds, fails permanently (see Retryable), runs out of attempts, or ctx ends.
// onRetry, when set, sees every error that is retried (for metrics and logs).
func (b Backoff) Do(ctx context.Context, op func(attempt int) error, onRetry func(error)) error {
	b = b.withDefaults()
	var err error
	for attempt := 1; ; attempt++ {
		if err = op(attempt); err == nil || !Retryable(err) || attempt >= b.Attempts {
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		if onRetry != nil {
			onRetry(err)
		}
		t := time.NewTimer(b.Delay(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// Retryable reports whether err may go away on its own: throttling (503 SlowDown, 429), server errors,
// timeouts, stalls, connection resets and short bodies are; missing objects, refused preconditions,
// authentication and other client errors, a certificate that does not verify, a listing refused by
// its bounds, an answer that is not the range asked (or longer, or encoded) and a cancelled context
// are not.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrNotFound) || errors.Is(err, ErrExists) || errors.Is(err, errWriter) ||
		errors.Is(err, errTLS) || errors.Is(err, ErrListing) || errors.Is(err, bounded.ErrTooLong) ||
		errors.Is(err, bounded.ErrRange) || errors.Is(err, bounded.ErrEncoded) {
		return false
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return statusRetryable(re.HTTPStatusCode())
	}
	var se interface{ HTTPStatusCode() int }
	if errors.As(err, &se) {
		return statusRetryable(se.HTTPStatusCode())
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling", "ThrottlingException":
			return true
		}
		return false
	}
	// Transport errors, resets, unexpected EOF, short reads: all transient from our point of view.
	return true
}

func statusRetryable(code int) bool {
	return code == 0 || code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout
}

// errWriter marks errors from the caller's writer (a full disk, a closed file): retrying the
// download cannot fix them.
var errWriter = errors.New("write failed")

// WriterError wraps an error from a caller's io.Writer so retries stop at once; use it in writers
// handed to GetRange/Get.
func WriterError(err error) error { return fmt.Errorf("%w: %w", errWriter, err) }
