package objstore

// Bounds on what an S3 endpoint answers (docs/security.md, "Bounds on S3 and peer answers"). Anyone
// who can write the bucket, or stands between warmd and the endpoint, controls these answers:
//
//   - a listing holds at most maxKeys keys over at most maxPages pages, each page body at most
//     maxPageBytes; a continuation token seen before, or a full page of keys all listed before, is
//     a loop and fails the listing at once;
//   - a part list (Parts) holds at most MaxParts parts numbered upwards, over pages of at most
//     maxPageBytes whose marker moves on, each checksum at most maxChecksumLen bytes;
//   - a ranged GET must answer the range asked (Content-Range, Content-Length), unencoded, and its
//     body may not go on past the range;
//   - every request stalls out (bounded.Client, s3.stallTimeout) and error bodies are read to 4 KiB;
//   - error text is escaped and cut (mapErr) before anyone prints it;
//   - a TLS endpoint whose certificate does not verify fails at once, naming AWS_CA_BUNDLE; there is
//     no fallback to an unverified connection.

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/maphash"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"warmd.io/warmd/pkg/bounded"
)

// maxPageBytes bounds one ListObjectsV2 page body: 1,000 keys of S3's largest (1,024 bytes) with
// their metadata are under 2 MiB.
const maxPageBytes = 8 << 20

// errTextMax bounds the text of an error from the S3 client (which quotes the server's message).
const errTextMax = 1024

// ErrListing marks a listing refused for its size or as a loop.
var ErrListing = errors.New("listing refused")

// errTLS marks an endpoint whose certificate did not verify: retrying cannot fix it.
var errTLS = errors.New("the S3 endpoint's TLS certificate does not verify")

// listing counts one List's pages and keys and spots loops. It keeps a 64-bit hash per key (8
// bytes, not the key) and a SHA-256 per token, so its memory is bounded by maxKeys and maxPages.
type listing struct {
	maxKeys, maxPages int
	pages, keys       int
	seed              maphash.Seed
	seen              map[uint64]struct{}
	tokens            map[[32]byte]struct{}
}

func newListing(maxKeys, maxPages int) *listing {
	return &listing{maxKeys: maxKeys, maxPages: maxPages, seed: maphash.MakeSeed(), seen: map[uint64]struct{}{}, tokens: map[[32]byte]struct{}{}}
}

// page counts a page of n keys and fails past either bound.
func (l *listing) page(n int) error {
	l.pages++
	l.keys += n
	if l.keys > l.maxKeys {
		return fmt.Errorf("%w: more than %d keys under the prefix (s3.maxListKeys); list a narrower prefix, or raise s3.maxListKeys if the store really holds a model that large", ErrListing, l.maxKeys)
	}
	if l.pages > l.maxPages {
		return fmt.Errorf("%w: more than %d pages (s3.maxListPages) for %d keys; the store pages too thinly, or raise s3.maxListPages", ErrListing, l.maxPages, l.keys)
	}
	return nil
}

// key records a listed key and reports whether it is new to this listing.
func (l *listing) key(k string) bool {
	h := maphash.String(l.seed, k)
	if _, ok := l.seen[h]; ok {
		return false
	}
	l.seen[h] = struct{}{}
	return true
}

// next checks the page just read (n keys, fresh of them new) and the token it points on with.
func (l *listing) next(n, fresh int, token string) error {
	if n > 0 && fresh == 0 {
		return fmt.Errorf("%w: page %d lists only keys listed before and says there are more; the store loops (a broken or hostile S3 endpoint)", ErrListing, l.pages)
	}
	sum := sha256.Sum256([]byte(token))
	if _, ok := l.tokens[sum]; ok {
		return fmt.Errorf("%w: page %d hands back a continuation token it gave before; the store loops (a broken or hostile S3 endpoint)", ErrListing, l.pages)
	}
	l.tokens[sum] = struct{}{}
	return nil
}

// checkGet refuses an answer to a GET of n bytes from off that is not that range, or is encoded.
func checkGet(out *s3.GetObjectOutput, off, n int64) error {
	if err := bounded.CheckEncoding(aws.ToString(out.ContentEncoding)); err != nil {
		return fmt.Errorf("%w; upload the object without Content-Encoding", err)
	}
	status := 0
	if r, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok {
		status = r.StatusCode
	}
	cl := int64(-1)
	if out.ContentLength != nil {
		cl = *out.ContentLength
	}
	return bounded.CheckRange(status, aws.ToString(out.ContentRange), cl, off, n)
}

// atEnd reads past a body that should be over: nil at EOF, ErrTooLong (from the bounded body) when
// it goes on.
func atEnd(r io.Reader) error {
	var one [1]byte
	for range 3 {
		n, err := r.Read(one[:])
		if err == io.EOF && n == 0 {
			return nil
		}
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: the body goes on past the range", bounded.ErrTooLong)
		}
	}
	return nil
}

// tlsProblem turns a certificate that did not verify into errTLS with the fix.
func tlsProblem(err error) error {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) {
		return fmt.Errorf("%w (%w): give the endpoint's CA in AWS_CA_BUNDLE or fix its certificate; warmd never falls back to an unverified connection", errTLS, err)
	}
	return nil
}
